package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestImageShortName(t *testing.T) {
	tests := []struct {
		name, ref, want string
	}{
		{"ko reference with tag and digest", "ko.local/knative.dev/networking/test/test_images/runtime:latest@sha256:0123abcd", "runtime"},
		{"docker hub reference with tag", "docker.io/envoyproxy/envoy:distroless-v1.38.9", "envoy"},
		{"bare name", "busybox", "busybox"},
		{"bare name with tag", "busybox:1.36", "busybox"},
		{"registry with port and no tag", "localhost:5000/team/app", "app"},
		{"registry with port and tag", "localhost:5000/team/app:v2", "app"},
		{"digest only", "ghcr.io/projectcontour/contour@sha256:beef", "contour"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, imageShortName(tc.ref)); diff != "" {
				t.Errorf("imageShortName(%q) (-want +got):\n%s", tc.ref, diff)
			}
		})
	}
}

func TestImageMapResolve(t *testing.T) {
	m := imageMap{
		"runtime":                        "/bin/images/runtime",
		"ghcr.io/projectcontour/contour": "/bin/contour",
		"contour":                        "/wrong/contour",
		"busybox":                        "",
	}
	tests := []struct {
		name, image, want string
		wantOK            bool
	}{
		{"short name matches", "ko.local/runtime:latest", "/bin/images/runtime", true},
		{"repository wins over short name", "ghcr.io/projectcontour/contour:v1.33.8", "/bin/contour", true},
		{"short name when the repository is not mapped", "docker.io/other/contour:v1", "/wrong/contour", true},
		{"ko hash suffix is ignored", "ko.local/runtime-0123456789abcdef0123456789abcdef:latest", "/bin/images/runtime", true},
		{"pass-through mapping", "busybox:1.36", "", true},
		{"unknown image", "docker.io/library/nginx:1.27", "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := m.resolve(tc.image)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("resolve(%q) executable (-want +got):\n%s", tc.image, diff)
			}
			if ok != tc.wantOK {
				t.Errorf("resolve(%q) ok = %v, want %v", tc.image, ok, tc.wantOK)
			}
		})
	}
}

func TestContainerArgv(t *testing.T) {
	tests := []struct {
		name    string
		image   string
		exe     string
		command []string
		args    []string
		want    []string
		wantErr bool
	}{{
		name:  "no command runs the entrypoint with args",
		image: "ko.local/runtime:latest", exe: "/bin/images/runtime",
		args: []string{"-port", "8080"},
		want: []string{"/bin/images/runtime", "-port", "8080"},
	}, {
		name:  "command naming the image replaces the entrypoint name",
		image: "docker.io/envoyproxy/envoy:distroless-v1.38.9", exe: "/cache/bin/envoy",
		command: []string{"envoy"}, args: []string{"-c", "/config/envoy.json"},
		want: []string{"/cache/bin/envoy", "-c", "/config/envoy.json"},
	}, {
		name:  "command naming the executable by absolute path keeps the rest of the command",
		image: "ghcr.io/projectcontour/contour:v1.33.8", exe: "/cache/bin/contour",
		command: []string{"/bin/contour", "envoy"}, args: []string{"shutdown-manager"},
		want: []string{"/cache/bin/contour", "envoy", "shutdown-manager"},
	}, {
		name:  "ko entrypoint path names the image",
		image: "ko.local/queue-0123456789abcdef0123456789abcdef", exe: "/cache/bin/queue",
		command: []string{"/ko-app/queue"},
		want:    []string{"/cache/bin/queue"},
	}, {
		name:  "another program runs as given on the host",
		image: "busybox", exe: "/bin/busybox",
		command: []string{"sh", "-c", "echo hi"},
		want:    []string{"sh", "-c", "echo hi"},
	}, {
		name:  "pass-through image runs its command",
		image: "busybox", exe: "",
		command: []string{"busybox"}, args: []string{"sleep", "1"},
		want: []string{"busybox", "sleep", "1"},
	}, {
		name:  "pass-through image without command is an error",
		image: "busybox", exe: "",
		wantErr: true,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := containerArgv(tc.image, tc.exe, tc.command, tc.args)
			if (err != nil) != tc.wantErr {
				t.Fatalf("containerArgv() error = %v, wantErr %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("containerArgv() (-want +got):\n%s", diff)
			}
		})
	}
}
