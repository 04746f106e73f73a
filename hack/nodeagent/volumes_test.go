package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// volumeObjects is fakeObjects as a volumeSource, with an API error to
// return instead of any object.
type volumeObjects struct {
	fakeObjects
	err error
}

func (v volumeObjects) secret(ns, name string) (*corev1.Secret, error) {
	if v.err != nil {
		return nil, v.err
	}
	return v.fakeObjects.secret(ns, name)
}

func (v volumeObjects) configMap(ns, name string) (*corev1.ConfigMap, error) {
	if v.err != nil {
		return nil, v.err
	}
	return v.fakeObjects.configMap(ns, name)
}

func (volumeObjects) serviceAccountToken(context.Context, *corev1.Pod, string, *int64) (string, error) {
	return "", errors.New("no tokens here")
}

// readDir returns every regular file under dir with its content and mode.
func readDir(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		st, err := os.Stat(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		out[rel] = st.Mode().Perm().String() + " " + string(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func inode(t *testing.T, p string) uint64 {
	t.Helper()
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return st.Sys().(*syscall.Stat_t).Ino
}

func TestSyncVolume(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	if err := writeVolume(dir, map[string]volumeFile{
		"ready":      {data: []byte("startup"), mode: 0o644},
		"same":       {data: []byte("kept"), mode: 0o644},
		"gone":       {data: []byte("x"), mode: 0o644},
		"nested/key": {data: []byte("a"), mode: 0o644},
	}); err != nil {
		t.Fatal(err)
	}
	sameInode := inode(t, filepath.Join(dir, "same"))
	readyInode := inode(t, filepath.Join(dir, "ready"))

	if err := syncVolume(dir, map[string]volumeFile{
		"ready":      {data: []byte("startup,ready"), mode: 0o644},
		"same":       {data: []byte("kept"), mode: 0o644},
		"new":        {data: []byte("added"), mode: 0o400},
		"nested/key": {data: []byte("b"), mode: 0o600},
	}); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"ready":      "-rw-r--r-- startup,ready",
		"same":       "-rw-r--r-- kept",
		"new":        "-r-------- added",
		"nested/key": "-rw------- b",
	}
	if diff := cmp.Diff(want, readDir(t, dir)); diff != "" {
		t.Errorf("volume after sync (-want +got):\n%s", diff)
	}
	if inode(t, filepath.Join(dir, "same")) != sameInode {
		t.Error("an unchanged file was rewritten")
	}
	if inode(t, filepath.Join(dir, "ready")) == readyInode {
		t.Error("a changed file was written in place, not replaced by a rename")
	}

	// a torn-down pod: nothing is recreated
	gone := filepath.Join(t.TempDir(), "removed")
	if err := syncVolume(gone, map[string]volumeFile{"k": {data: []byte("v"), mode: 0o644}}); err == nil {
		t.Error("sync into a missing directory succeeded")
	}
	if _, err := os.Stat(gone); !os.IsNotExist(err) {
		t.Errorf("sync recreated a removed volume: %v", err)
	}
}

func TestRefreshedFiles(t *testing.T) {
	yes := true
	objects := fakeObjects{
		configMaps: map[string]*corev1.ConfigMap{"ns/cfg": {Data: map[string]string{"ready": "startup,ready"}, BinaryData: map[string][]byte{"bin": {1}}}},
		secrets:    map[string]*corev1.Secret{"ns/creds": {Data: map[string][]byte{"token": []byte("t2")}}},
	}
	cmVol := func(name string, optional *bool, items ...corev1.KeyToPath) corev1.Volume {
		return corev1.Volume{Name: "v", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: name}, Optional: optional, Items: items}}}
	}
	unavailable := apierrors.NewServiceUnavailable("etcd is down")
	for _, tc := range []struct {
		name   string
		vol    corev1.Volume
		err    error
		want   map[string]volumeFile
		wantOK bool
	}{{
		name:   "configMap: every key, Data and BinaryData",
		vol:    cmVol("cfg", nil),
		want:   map[string]volumeFile{"ready": {data: []byte("startup,ready"), mode: 0o644}, "bin": {data: []byte{1}, mode: 0o644}},
		wantOK: true,
	}, {
		name:   "configMap: listed items at their paths",
		vol:    cmVol("cfg", nil, corev1.KeyToPath{Key: "ready", Path: "state/ready"}),
		want:   map[string]volumeFile{"state/ready": {data: []byte("startup,ready"), mode: 0o644}},
		wantOK: true,
	}, {
		name:   "configMap: a listed key removed from a required volume keeps the old files",
		vol:    cmVol("cfg", nil, corev1.KeyToPath{Key: "missing", Path: "m"}),
		wantOK: false,
	}, {
		name:   "configMap: deleted, required: the old files stay",
		vol:    cmVol("nope", nil),
		wantOK: false,
	}, {
		name:   "configMap: deleted, optional: the volume empties",
		vol:    cmVol("nope", &yes),
		wantOK: true,
	}, {
		name:   "configMap: the API fails, even for an optional volume: the old files stay",
		vol:    cmVol("cfg", &yes),
		err:    unavailable,
		wantOK: false,
	}, {
		name: "secret",
		vol: corev1.Volume{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: "creds", DefaultMode: new(int32(0o400))}}},
		want:   map[string]volumeFile{"token": {data: []byte("t2"), mode: 0o400}},
		wantOK: true,
	}, {
		name:   "other volume types are not refreshed",
		vol:    corev1.Volume{Name: "e", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		wantOK: false,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			files, ok := refreshedFiles("ns", volumeObjects{fakeObjects: objects, err: tc.err}, tc.vol)
			if ok != tc.wantOK {
				t.Fatalf("ok = %v, want %v (files %v)", ok, tc.wantOK, files)
			}
			if !ok {
				return
			}
			if diff := cmp.Diff(tc.want, files, cmp.AllowUnexported(volumeFile{})); diff != "" {
				t.Errorf("files (-want +got):\n%s", diff)
			}
		})
	}
}
