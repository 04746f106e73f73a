package contour

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sort"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrs "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/sets"
	corev1listers "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"knative.dev/networking/pkg/apis/networking/v1alpha1"
	"knative.dev/networking/pkg/status"

	"github.com/hitless/hitless/pkg/config"
	"github.com/hitless/hitless/pkg/resources"
)

// fleetPods are the ready Envoy pods of a fleet and the port their HTTP
// listener has inside the pod.
type fleetPods struct {
	IPs  sets.Set[string]
	Port string
}

// envoyTargets finds Envoy pods through the EndpointSlices of each fleet's
// Service, so probes go to every pod, never through the Service's VIP.
type envoyTargets struct {
	services       corev1listers.ServiceLister
	endpointSlices discoverylisters.EndpointSliceLister
	metrics        *metrics
}

var _ status.ProbeTargetLister = (*envoyTargets)(nil)

// errNoEnvoyPods means a fleet has no ready Envoy pod: nobody can confirm.
var errNoEnvoyPods = errors.New("no ready Envoy pod")

// pods returns the ready Envoy pods of a fleet.
func (t *envoyTargets) pods(fleet config.Fleet) (fleetPods, error) {
	svc, err := t.services.Services(fleet.Service.Namespace).Get(fleet.Service.Name)
	if apierrs.IsNotFound(err) {
		return fleetPods{}, fmt.Errorf("Envoy Service %s of class %s does not exist: %w", fleet.Service, fleet.Class, errNoEnvoyPods)
	} else if err != nil {
		return fleetPods{}, fmt.Errorf("failed to get Envoy Service %s: %w", fleet.Service, err)
	}
	portName, ok := httpPortName(svc)
	if !ok {
		return fleetPods{}, fmt.Errorf("Envoy Service %s has no port 80 or port named http: %w", fleet.Service, errNoEnvoyPods)
	}
	slices, err := t.endpointSlices.EndpointSlices(svc.Namespace).List(labels.SelectorFromSet(labels.Set{
		discoveryv1.LabelServiceName: svc.Name,
	}))
	if err != nil {
		return fleetPods{}, fmt.Errorf("failed to list EndpointSlices of %s: %w", fleet.Service, err)
	}
	out := fleetPods{IPs: sets.New[string]()}
	for _, s := range slices {
		if s.AddressType != discoveryv1.AddressTypeIPv4 && s.AddressType != discoveryv1.AddressTypeIPv6 {
			continue
		}
		port := ""
		for _, p := range s.Ports {
			if p.Name != nil && *p.Name == portName && p.Port != nil {
				port = fmt.Sprint(*p.Port)
			}
		}
		if port == "" {
			continue
		}
		for _, e := range s.Endpoints {
			if e.Conditions.Ready != nil && !*e.Conditions.Ready {
				continue
			}
			out.Port = port
			out.IPs.Insert(e.Addresses...)
		}
	}
	if out.IPs.Len() == 0 {
		return fleetPods{}, fmt.Errorf("Envoy Service %s of class %s has no ready endpoints: %w", fleet.Service, fleet.Class, errNoEnvoyPods)
	}
	return out, nil
}

func httpPortName(svc *corev1.Service) (string, bool) {
	for _, p := range svc.Spec.Ports {
		if p.Port == 80 {
			return p.Name, true
		}
	}
	for _, p := range svc.Spec.Ports {
		if p.Name == "http" {
			return p.Name, true
		}
	}
	return "", false
}

// ListProbeTargets implements status.ProbeTargetLister for serving
// KIngresses and for the in-memory warm KIngress of a rollout.
func (t *envoyTargets) ListProbeTargets(ctx context.Context, ing *v1alpha1.Ingress) ([]status.ProbeTarget, error) {
	var targets []resources.ProbeTarget
	var err error
	if _, warm := resources.IsWarmKey(ing.Name); warm {
		targets, err = resources.WarmProbeTargets(ctx, ing)
	} else {
		targets, err = resources.ProbeTargets(ctx, ing)
	}
	if err != nil {
		return nil, err
	}
	cfg := config.FromContextOrDefaults(ctx).Contour
	byClass := map[string][]*url.URL{}
	for _, tg := range targets {
		byClass[tg.Class] = append(byClass[tg.Class], &url.URL{Scheme: "http", Host: tg.Host, Path: tg.Path})
	}
	classes := make([]string, 0, len(byClass))
	for c := range byClass {
		classes = append(classes, c)
	}
	sort.Strings(classes)
	out := make([]status.ProbeTarget, 0, len(classes))
	for _, class := range classes {
		fleet, ok := cfg.FleetByClass(class)
		if !ok {
			return nil, fmt.Errorf("class %s has no fleet in config-contour", class)
		}
		pods, err := t.pods(fleet)
		if err != nil {
			return nil, err
		}
		out = append(out, status.ProbeTarget{PodIPs: pods.IPs, PodPort: pods.Port, Port: "80", URLs: byClass[class]})
		t.metrics.probesScheduled(pods.IPs.Len() * len(byClass[class]))
	}
	return out, nil
}
