package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// volumeSource is what materializing volumes reads from the API.
type volumeSource interface {
	objectSource
	// serviceAccountToken returns a token bound to pod for the audience.
	serviceAccountToken(ctx context.Context, pod *corev1.Pod, audience string, expirationSeconds *int64) (string, error)
}

// volumeFile is one file of a secret, configMap, downwardAPI or projected
// volume.
type volumeFile struct {
	data []byte
	mode os.FileMode
}

// materializeVolumes writes the pod's volumes as directories under dir and
// returns the host directory of each volume by name. emptyDir, secret,
// configMap, downwardAPI, projected (with service account tokens) and hostPath
// are supported; their contents are written when the pod starts, and
// configMap and secret volumes are kept current after (podRunner.startVolumeRefresh).
func materializeVolumes(ctx context.Context, ec envContext, src volumeSource, dir string) (map[string]string, error) {
	pod := ec.pod
	out := map[string]string{}
	for _, v := range pod.Spec.Volumes {
		path := filepath.Join(dir, v.Name)
		var files map[string]volumeFile
		var err error
		switch {
		case v.EmptyDir != nil:
		case v.HostPath != nil:
			path = v.HostPath.Path
			err = ensureHostPath(v.HostPath)
		case v.Secret != nil:
			files, err = secretFiles(ec, src, v.Secret.SecretName, v.Secret.Items, v.Secret.DefaultMode, v.Secret.Optional)
		case v.ConfigMap != nil:
			files, err = configMapFiles(ec, src, v.ConfigMap.Name, v.ConfigMap.Items, v.ConfigMap.DefaultMode, v.ConfigMap.Optional)
		case v.DownwardAPI != nil:
			files, err = downwardFiles(ec, v.DownwardAPI.Items, v.DownwardAPI.DefaultMode)
		case v.Projected != nil:
			files, err = projectedFiles(ctx, ec, src, v.Projected)
		default:
			err = fmt.Errorf("volume type is not supported by the hitless node agent")
		}
		if err != nil {
			return nil, fmt.Errorf("volume %q: %w", v.Name, err)
		}
		if v.HostPath == nil {
			if err := writeVolume(path, files); err != nil {
				return nil, fmt.Errorf("volume %q: %w", v.Name, err)
			}
		}
		out[v.Name] = path
	}
	return out, nil
}

// ensureHostPath creates a hostPath volume of type DirectoryOrCreate or
// FileOrCreate.
func ensureHostPath(hp *corev1.HostPathVolumeSource) error {
	if hp.Type == nil {
		return nil
	}
	switch *hp.Type {
	case corev1.HostPathDirectoryOrCreate:
		return os.MkdirAll(hp.Path, 0o755)
	case corev1.HostPathFileOrCreate:
		if _, err := os.Stat(hp.Path); os.IsNotExist(err) {
			if err := os.MkdirAll(filepath.Dir(hp.Path), 0o755); err != nil {
				return err
			}
			return os.WriteFile(hp.Path, nil, 0o644)
		}
	}
	return nil
}

// writeVolume creates dir (keeping what a restarted pod wrote in an emptyDir)
// and writes files into it.
func writeVolume(dir string, files map[string]volumeFile) error {
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return err
	}
	os.Chmod(dir, 0o777|os.ModeSticky) // emptyDirs are world-writable
	for name, f := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, f.data, f.mode); err != nil {
			return err
		}
		if err := os.Chmod(p, f.mode); err != nil {
			return err
		}
	}
	return nil
}

func fileMode(item, def *int32) os.FileMode {
	switch {
	case item != nil:
		return os.FileMode(*item)
	case def != nil:
		return os.FileMode(*def)
	}
	return 0o644
}

// keyFiles maps keys to files, all of them or only the listed items.
func keyFiles(data map[string][]byte, items []corev1.KeyToPath, def *int32, optional bool, what string) (map[string]volumeFile, error) {
	out := map[string]volumeFile{}
	if len(items) == 0 {
		for k, v := range data {
			out[k] = volumeFile{data: v, mode: fileMode(nil, def)}
		}
		return out, nil
	}
	for _, it := range items {
		v, ok := data[it.Key]
		if !ok {
			if optional {
				continue
			}
			return nil, fmt.Errorf("key %q not found in %s", it.Key, what)
		}
		out[it.Path] = volumeFile{data: v, mode: fileMode(it.Mode, def)}
	}
	return out, nil
}

func secretFiles(ec envContext, src volumeSource, name string, items []corev1.KeyToPath, def *int32, opt *bool) (map[string]volumeFile, error) {
	s, err := src.secret(ec.pod.Namespace, name)
	return secretVolume(s, err, name, items, def, opt)
}

// secretVolume is the files of a secret volume from the result of reading
// the Secret.
func secretVolume(s *corev1.Secret, err error, name string, items []corev1.KeyToPath, def *int32, opt *bool) (map[string]volumeFile, error) {
	if err != nil {
		if optional(opt) {
			return nil, nil
		}
		return nil, fmt.Errorf("secret %q: %w", name, err)
	}
	return keyFiles(s.Data, items, def, optional(opt), "secret "+name)
}

func configMapFiles(ec envContext, src volumeSource, name string, items []corev1.KeyToPath, def *int32, opt *bool) (map[string]volumeFile, error) {
	cm, err := src.configMap(ec.pod.Namespace, name)
	return configMapVolume(cm, err, name, items, def, opt)
}

// configMapVolume is the files of a configMap volume from the result of
// reading the ConfigMap.
func configMapVolume(cm *corev1.ConfigMap, err error, name string, items []corev1.KeyToPath, def *int32, opt *bool) (map[string]volumeFile, error) {
	if err != nil {
		if optional(opt) {
			return nil, nil
		}
		return nil, fmt.Errorf("configmap %q: %w", name, err)
	}
	data := map[string][]byte{}
	for k, v := range cm.Data {
		data[k] = []byte(v)
	}
	for k, v := range cm.BinaryData {
		data[k] = v
	}
	return keyFiles(data, items, def, optional(opt), "configmap "+name)
}

// refreshedFiles reads the object behind a configMap or secret volume again
// and returns its files; ok is false when the volume is of another type or
// its content cannot be known now (an API error other than NotFound, or a
// missing key), in which case the files already written stay, as with kubelet.
func refreshedFiles(ns string, src volumeSource, v corev1.Volume) (files map[string]volumeFile, ok bool) {
	var err error
	switch {
	case v.ConfigMap != nil:
		cm, getErr := src.configMap(ns, v.ConfigMap.Name)
		if getErr != nil && !apierrors.IsNotFound(getErr) {
			return nil, false
		}
		files, err = configMapVolume(cm, getErr, v.ConfigMap.Name, v.ConfigMap.Items, v.ConfigMap.DefaultMode, v.ConfigMap.Optional)
	case v.Secret != nil:
		s, getErr := src.secret(ns, v.Secret.SecretName)
		if getErr != nil && !apierrors.IsNotFound(getErr) {
			return nil, false
		}
		files, err = secretVolume(s, getErr, v.Secret.SecretName, v.Secret.Items, v.Secret.DefaultMode, v.Secret.Optional)
	default:
		return nil, false
	}
	return files, err == nil
}

// syncVolume makes dir hold exactly files: a changed file is replaced by a
// rename (a reader sees the old content or the new, never a partial write),
// a file whose key is gone is removed. dir must exist: a pod being torn down
// has none, and nothing is recreated.
func syncVolume(dir string, files map[string]volumeFile) error {
	if _, err := os.Stat(dir); err != nil {
		return err
	}
	for name, f := range files {
		p := filepath.Join(dir, name)
		if cur, err := os.ReadFile(p); err == nil && bytes.Equal(cur, f.data) {
			if st, err := os.Stat(p); err == nil && st.Mode().Perm() == f.mode.Perm() {
				continue
			}
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		tmp, err := os.CreateTemp(filepath.Dir(p), ".update-*")
		if err != nil {
			return err
		}
		_, werr := tmp.Write(f.data)
		cerr := tmp.Close()
		if err := errors.Join(werr, cerr, os.Chmod(tmp.Name(), f.mode)); err != nil {
			os.Remove(tmp.Name())
			return err
		}
		if err := os.Rename(tmp.Name(), p); err != nil {
			os.Remove(tmp.Name())
			return err
		}
	}
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		if _, keep := files[rel]; !keep {
			return os.Remove(p)
		}
		return nil
	})
}

func downwardFiles(ec envContext, items []corev1.DownwardAPIVolumeFile, def *int32) (map[string]volumeFile, error) {
	out := map[string]volumeFile{}
	for _, it := range items {
		var v string
		var err error
		switch {
		case it.FieldRef != nil:
			v, err = podField(ec, it.FieldRef.FieldPath)
		case it.ResourceFieldRef != nil:
			c := containerByName(ec.pod, it.ResourceFieldRef.ContainerName)
			if c == nil {
				return nil, fmt.Errorf("container %q not found", it.ResourceFieldRef.ContainerName)
			}
			v, err = resourceField(ec, c, it.ResourceFieldRef)
		}
		if err != nil {
			return nil, err
		}
		out[it.Path] = volumeFile{data: []byte(v), mode: fileMode(it.Mode, def)}
	}
	return out, nil
}

func projectedFiles(ctx context.Context, ec envContext, src volumeSource, p *corev1.ProjectedVolumeSource) (map[string]volumeFile, error) {
	out := map[string]volumeFile{}
	for _, s := range p.Sources {
		var files map[string]volumeFile
		var err error
		switch {
		case s.Secret != nil:
			files, err = secretFiles(ec, src, s.Secret.Name, s.Secret.Items, p.DefaultMode, s.Secret.Optional)
		case s.ConfigMap != nil:
			files, err = configMapFiles(ec, src, s.ConfigMap.Name, s.ConfigMap.Items, p.DefaultMode, s.ConfigMap.Optional)
		case s.DownwardAPI != nil:
			files, err = downwardFiles(ec, s.DownwardAPI.Items, p.DefaultMode)
		case s.ServiceAccountToken != nil:
			var tok string
			tok, err = src.serviceAccountToken(ctx, ec.pod, s.ServiceAccountToken.Audience, s.ServiceAccountToken.ExpirationSeconds)
			files = map[string]volumeFile{s.ServiceAccountToken.Path: {data: []byte(tok), mode: fileMode(nil, p.DefaultMode)}}
		default:
			err = fmt.Errorf("projected source is not supported")
		}
		if err != nil {
			return nil, err
		}
		for k, v := range files {
			out[k] = v
		}
	}
	return out, nil
}

// tokenRequest is the TokenRequest for a pod-bound service account token.
func tokenRequest(pod *corev1.Pod, audience string, expirationSeconds *int64) *authv1.TokenRequest {
	tr := &authv1.TokenRequest{Spec: authv1.TokenRequestSpec{
		ExpirationSeconds: expirationSeconds,
		BoundObjectRef:    &authv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}
	if audience != "" {
		tr.Spec.Audiences = []string{audience}
	}
	return tr
}

// containerByName finds a container or init container of the pod.
func containerByName(pod *corev1.Pod, name string) *corev1.Container {
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == name {
			return &pod.Spec.Containers[i]
		}
	}
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == name {
			return &pod.Spec.InitContainers[i]
		}
	}
	return nil
}
