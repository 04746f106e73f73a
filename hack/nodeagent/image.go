package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path"
	"regexp"
	"strings"
)

// imageMap maps an image's short name (or its repository without tag and
// digest) to the host executable that stands in for the image's entrypoint.
// An empty executable marks a pass-through image: the container's command runs
// as given, resolved on the host.
type imageMap map[string]string

// loadImageMap reads the JSON object of the --image-map file.
func loadImageMap(file string) (imageMap, error) {
	raw, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("failed to read image map: %w", err)
	}
	m := imageMap{}
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("failed to parse image map %s: %w", file, err)
	}
	return m, nil
}

// imageRepository returns the reference without digest and tag:
// "ko.local/a/runtime:latest@sha256:ab" -> "ko.local/a/runtime".
func imageRepository(ref string) string {
	if i := strings.IndexByte(ref, '@'); i >= 0 {
		ref = ref[:i]
	}
	// A colon after the last slash starts the tag; one before it belongs to a
	// registry port ("localhost:5000/app").
	if i := strings.LastIndexByte(ref, ':'); i > strings.LastIndexByte(ref, '/') {
		ref = ref[:i]
	}
	return ref
}

// imageShortName returns the last path element of an image reference with
// tag and digest stripped: "docker.io/envoyproxy/envoy:distroless-v1.38.9" ->
// "envoy".
func imageShortName(ref string) string {
	return path.Base(imageRepository(ref))
}

// koHashSuffix matches the "-<md5>" ko appends to the base name of an import
// path when it names images without --preserve-import-paths.
var koHashSuffix = regexp.MustCompile(`-[0-9a-f]{32}$`)

// resolve returns the executable mapped to image: the repository first, then
// the short name, then the short name without a ko hash suffix.
func (m imageMap) resolve(image string) (string, bool) {
	repo := imageRepository(image)
	short := path.Base(repo)
	for _, key := range []string{repo, short, koHashSuffix.ReplaceAllString(short, "")} {
		if exe, ok := m[key]; ok {
			return exe, true
		}
	}
	return "", false
}

// containerArgv decides what runs for a container whose image maps to exe, the
// way a container runtime combines the image entrypoint with command and args:
//   - no command: exe followed by args;
//   - command[0] names the entrypoint (its base name is the image's short name
//     or exe's base name): exe, then command[1:], then args;
//   - any other command (or a pass-through image, exe == ""): the command
//     itself followed by args, command[0] resolved on the host, as if the image
//     also shipped that program.
func containerArgv(image, exe string, command, args []string) ([]string, error) {
	if len(command) == 0 {
		if exe == "" {
			return nil, fmt.Errorf("image %q is mapped to pass-through, but the container has no command", image)
		}
		return append([]string{exe}, args...), nil
	}
	argv := make([]string, 0, len(command)+len(args))
	if exe != "" && namesEntrypoint(command[0], image, exe) {
		argv = append(argv, exe)
		argv = append(argv, command[1:]...)
	} else {
		argv = append(argv, command...)
	}
	return append(argv, args...), nil
}

// namesEntrypoint reports whether a container command's first element refers
// to the image's own entrypoint rather than to another program.
func namesEntrypoint(cmd0, image, exe string) bool {
	base := path.Base(cmd0)
	return base == imageShortName(image) || base == path.Base(exe) ||
		base == koHashSuffix.ReplaceAllString(imageShortName(image), "")
}
