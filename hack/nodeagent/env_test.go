package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

type fakeObjects struct {
	secrets    map[string]*corev1.Secret
	configMaps map[string]*corev1.ConfigMap
}

func (f fakeObjects) secret(ns, name string) (*corev1.Secret, error) {
	if s, ok := f.secrets[ns+"/"+name]; ok {
		return s, nil
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "secrets"}, name)
}

func (f fakeObjects) configMap(ns, name string) (*corev1.ConfigMap, error) {
	if c, ok := f.configMaps[ns+"/"+name]; ok {
		return c, nil
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "configmaps"}, name)
}

func TestContainerEnv(t *testing.T) {
	yes := true
	objects := fakeObjects{
		secrets:    map[string]*corev1.Secret{"ns/creds": {Data: map[string][]byte{"token": []byte("s3cr3t"), "user": []byte("me")}}},
		configMaps: map[string]*corev1.ConfigMap{"ns/cfg": {Data: map[string]string{"level": "debug", "mode": "fast"}}},
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "ns", UID: "uid-1", Labels: map[string]string{"app": "web"}},
		Spec:       corev1.PodSpec{NodeName: "hitless-node", ServiceAccountName: "default"},
	}
	ec := envContext{
		pod: pod, podIP: "10.244.0.9", hostIP: "10.244.0.1", objects: objects,
		nodeAllocatable: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Gi")},
		kubernetesHost:  "10.96.0.1", kubernetesPort: "443",
	}
	base := []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", "HOSTNAME=web-1",
		"KUBERNETES_SERVICE_HOST=10.96.0.1", "KUBERNETES_SERVICE_PORT=443", "KUBERNETES_SERVICE_PORT_HTTPS=443",
		"KUBERNETES_PORT=tcp://10.96.0.1:443",
	}
	field := func(p string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: p}}
	}
	tests := []struct {
		name    string
		c       corev1.Container
		want    []string
		wantErr bool
	}{{
		name: "values expand references to earlier variables only",
		c: corev1.Container{Env: []corev1.EnvVar{
			{Name: "PORT", Value: "8080"},
			{Name: "URL", Value: "http://$(HOSTNAME):$(PORT)/$(LATER)"},
			{Name: "LATER", Value: "x"},
		}},
		want: append(base, "PORT=8080", "URL=http://web-1:8080/$(LATER)", "LATER=x"),
	}, {
		name: "downward API fields",
		c: corev1.Container{Env: []corev1.EnvVar{
			{Name: "POD_NAME", ValueFrom: field("metadata.name")},
			{Name: "POD_NAMESPACE", ValueFrom: field("metadata.namespace")},
			{Name: "POD_UID", ValueFrom: field("metadata.uid")},
			{Name: "POD_IP", ValueFrom: field("status.podIP")},
			{Name: "NODE", ValueFrom: field("spec.nodeName")},
			{Name: "SA", ValueFrom: field("spec.serviceAccountName")},
			{Name: "APP", ValueFrom: field("metadata.labels['app']")},
		}},
		want: append(base, "POD_NAME=web-1", "POD_NAMESPACE=ns", "POD_UID=uid-1", "POD_IP=10.244.0.9",
			"NODE=hitless-node", "SA=default", "APP=web"),
	}, {
		name: "secret and configmap keys, a missing optional key is left out",
		c: corev1.Container{Env: []corev1.EnvVar{
			{Name: "TOKEN", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}, Key: "token"}}},
			{Name: "LEVEL", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}, Key: "level"}}},
			{Name: "MAYBE", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}, Key: "nope", Optional: &yes}}},
		}},
		want: append(base, "TOKEN=s3cr3t", "LEVEL=debug"),
	}, {
		name: "envFrom with prefix, env overrides it",
		c: corev1.Container{
			EnvFrom: []corev1.EnvFromSource{
				{Prefix: "CFG_", ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}},
				{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "absent"}, Optional: &yes}},
			},
			Env: []corev1.EnvVar{{Name: "CFG_mode", Value: "slow"}},
		},
		want: append(base, "CFG_level=debug", "CFG_mode=slow"),
	}, {
		name: "resource fields use the limit, or node allocatable when unset",
		c: corev1.Container{
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1500m")}},
			Env: []corev1.EnvVar{
				{Name: "CPU", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.cpu"}}},
				{Name: "MCPU", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{
					Resource: "limits.cpu", Divisor: resource.MustParse("1m")}}},
				{Name: "MEM_MI", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{
					Resource: "limits.memory", Divisor: resource.MustParse("1Mi")}}},
			},
		},
		want: append(base, "CPU=2", "MCPU=1500", "MEM_MI=65536"),
	}, {
		name: "a missing required secret is an error",
		c: corev1.Container{Env: []corev1.EnvVar{{Name: "TOKEN", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "absent"}, Key: "token"}}}}},
		wantErr: true,
	}, {
		name: "a missing required configmap key is an error",
		c: corev1.Container{Env: []corev1.EnvVar{{Name: "X", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}, Key: "nope"}}}}},
		wantErr: true,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := containerEnv(ec, &tc.c)
			if (err != nil) != tc.wantErr {
				t.Fatalf("containerEnv() error = %v, wantErr %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("containerEnv() (-want +got):\n%s", diff)
			}
		})
	}
}
