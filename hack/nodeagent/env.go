package main

import (
	"fmt"
	"math"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// objectSource reads the Secrets and ConfigMaps that env vars and volumes
// refer to. Implementations return an error satisfying apierrors.IsNotFound for
// a missing object.
type objectSource interface {
	secret(namespace, name string) (*corev1.Secret, error)
	configMap(namespace, name string) (*corev1.ConfigMap, error)
}

// envContext is what env resolution needs besides the container.
type envContext struct {
	pod    *corev1.Pod
	podIP  string
	hostIP string
	// nodeAllocatable stands in for unset limits in resourceFieldRef.
	nodeAllocatable corev1.ResourceList
	// kubernetesService is "host:port" of the default/kubernetes Service.
	kubernetesHost, kubernetesPort string
	objects                        objectSource
}

// orderedEnv is an env list where a later definition replaces an earlier one
// in place.
type orderedEnv struct {
	names  []string
	values map[string]string
}

func (e *orderedEnv) set(name, value string) {
	if e.values == nil {
		e.values = map[string]string{}
	}
	if _, ok := e.values[name]; !ok {
		e.names = append(e.names, name)
	}
	e.values[name] = value
}

func (e *orderedEnv) lookup(name string) (string, bool) {
	v, ok := e.values[name]
	return v, ok
}

func (e *orderedEnv) list() []string {
	out := make([]string, 0, len(e.names))
	for _, n := range e.names {
		out = append(out, n+"="+e.values[n])
	}
	return out
}

// containerEnv resolves a container's environment as the kubelet does: a
// runtime base (PATH, HOME, HOSTNAME), the kubernetes Service variables, then
// envFrom, then env with $(VAR) references to earlier variables expanded and
// valueFrom resolved (fieldRef, resourceFieldRef, secretKeyRef,
// configMapKeyRef).
func containerEnv(ec envContext, c *corev1.Container) ([]string, error) {
	var env orderedEnv
	env.set("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	env.set("HOME", "/root")
	env.set("HOSTNAME", podHostname(ec.pod))
	if ec.kubernetesHost != "" {
		env.set("KUBERNETES_SERVICE_HOST", ec.kubernetesHost)
		env.set("KUBERNETES_SERVICE_PORT", ec.kubernetesPort)
		env.set("KUBERNETES_SERVICE_PORT_HTTPS", ec.kubernetesPort)
		env.set("KUBERNETES_PORT", "tcp://"+ec.kubernetesHost+":"+ec.kubernetesPort)
	}
	ns := ec.pod.Namespace
	for _, from := range c.EnvFrom {
		switch {
		case from.ConfigMapRef != nil:
			cm, err := ec.objects.configMap(ns, from.ConfigMapRef.Name)
			if err != nil {
				if optional(from.ConfigMapRef.Optional) {
					continue
				}
				return nil, fmt.Errorf("configmap %q: %w", from.ConfigMapRef.Name, err)
			}
			for _, k := range sortedKeys(cm.Data) {
				env.set(from.Prefix+k, cm.Data[k])
			}
		case from.SecretRef != nil:
			s, err := ec.objects.secret(ns, from.SecretRef.Name)
			if err != nil {
				if optional(from.SecretRef.Optional) {
					continue
				}
				return nil, fmt.Errorf("secret %q: %w", from.SecretRef.Name, err)
			}
			for _, k := range sortedKeys(s.Data) {
				env.set(from.Prefix+k, string(s.Data[k]))
			}
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			env.set(e.Name, expandVars(e.Value, env.lookup))
			continue
		}
		v, skip, err := valueFrom(ec, c, e.ValueFrom)
		if err != nil {
			return nil, fmt.Errorf("env %s: %w", e.Name, err)
		}
		if !skip {
			env.set(e.Name, v)
		}
	}
	return env.list(), nil
}

func optional(b *bool) bool { return b != nil && *b }

// valueFrom resolves one env source; skip is true for a missing optional key.
func valueFrom(ec envContext, c *corev1.Container, src *corev1.EnvVarSource) (value string, skip bool, err error) {
	ns := ec.pod.Namespace
	switch {
	case src.FieldRef != nil:
		v, err := podField(ec, src.FieldRef.FieldPath)
		return v, false, err
	case src.ResourceFieldRef != nil:
		v, err := resourceField(ec, c, src.ResourceFieldRef)
		return v, false, err
	case src.SecretKeyRef != nil:
		ref := src.SecretKeyRef
		s, err := ec.objects.secret(ns, ref.Name)
		if err != nil {
			if optional(ref.Optional) {
				return "", true, nil
			}
			return "", false, fmt.Errorf("secret %q: %w", ref.Name, err)
		}
		v, ok := s.Data[ref.Key]
		if !ok {
			if optional(ref.Optional) {
				return "", true, nil
			}
			return "", false, fmt.Errorf("couldn't find key %s in Secret %s/%s", ref.Key, ns, ref.Name)
		}
		return string(v), false, nil
	case src.ConfigMapKeyRef != nil:
		ref := src.ConfigMapKeyRef
		cm, err := ec.objects.configMap(ns, ref.Name)
		if err != nil {
			if optional(ref.Optional) {
				return "", true, nil
			}
			return "", false, fmt.Errorf("configmap %q: %w", ref.Name, err)
		}
		v, ok := cm.Data[ref.Key]
		if !ok {
			if optional(ref.Optional) {
				return "", true, nil
			}
			return "", false, fmt.Errorf("couldn't find key %s in ConfigMap %s/%s", ref.Key, ns, ref.Name)
		}
		return v, false, nil
	}
	return "", false, fmt.Errorf("unsupported valueFrom source")
}

// podField resolves a downward API fieldRef path.
func podField(ec envContext, path string) (string, error) {
	p := ec.pod
	switch path {
	case "metadata.name":
		return p.Name, nil
	case "metadata.namespace":
		return p.Namespace, nil
	case "metadata.uid":
		return string(p.UID), nil
	case "spec.nodeName":
		return p.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return p.Spec.ServiceAccountName, nil
	case "status.podIP", "status.podIPs":
		return ec.podIP, nil
	case "status.hostIP", "status.hostIPs":
		return ec.hostIP, nil
	case "metadata.labels":
		return formatMap(p.Labels), nil
	case "metadata.annotations":
		return formatMap(p.Annotations), nil
	}
	for prefix, m := range map[string]map[string]string{"metadata.labels": p.Labels, "metadata.annotations": p.Annotations} {
		if key, ok := strings.CutPrefix(path, prefix+"['"); ok && strings.HasSuffix(key, "']") {
			return m[strings.TrimSuffix(key, "']")], nil
		}
	}
	return "", fmt.Errorf("unsupported fieldRef %q", path)
}

// formatMap renders labels or annotations as the downward API does:
// key="value" lines sorted by key.
func formatMap(m map[string]string) string {
	var b strings.Builder
	for i, k := range sortedKeys(m) {
		if i > 0 {
			b.WriteByte('\n')
		}
		fmt.Fprintf(&b, "%s=%q", k, m[k])
	}
	return b.String()
}

// resourceField resolves a resourceFieldRef: the container's limit or request,
// a missing limit standing for the node's allocatable amount, divided by the
// divisor and rounded up.
func resourceField(ec envContext, c *corev1.Container, ref *corev1.ResourceFieldSelector) (string, error) {
	kind, name, ok := strings.Cut(ref.Resource, ".")
	if !ok {
		return "", fmt.Errorf("unsupported resourceFieldRef %q", ref.Resource)
	}
	list := c.Resources.Limits
	if kind == "requests" {
		list = c.Resources.Requests
	}
	q, ok := list[corev1.ResourceName(name)]
	if !ok {
		q, ok = ec.nodeAllocatable[corev1.ResourceName(name)]
		if !ok {
			return "0", nil
		}
	}
	divisor := ref.Divisor
	if divisor.IsZero() {
		divisor = resource.MustParse("1")
	}
	v := math.Ceil(float64(q.MilliValue()) / float64(divisor.MilliValue()))
	return fmt.Sprintf("%d", int64(v)), nil
}
