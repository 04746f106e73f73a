package config

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	netcfg "knative.dev/networking/pkg/config"
	"knative.dev/pkg/configmap"
)

type cfgKey struct{}

// Config is the configuration a reconcile sees: config-contour and
// config-network as they were when the reconcile started.
type Config struct {
	Contour *Contour
	Network *netcfg.Config
}

// FromContext returns the Config a Store attached to ctx.
func FromContext(ctx context.Context) *Config {
	c, _ := ctx.Value(cfgKey{}).(*Config)
	return c
}

// FromContextOrDefaults returns the Config of ctx, or the defaults.
func FromContextOrDefaults(ctx context.Context) *Config {
	if c := FromContext(ctx); c != nil {
		return c
	}
	network, _ := netcfg.NewConfigFromMap(nil)
	return &Config{Contour: DefaultContour(), Network: network}
}

// ToContext attaches c to ctx.
func ToContext(ctx context.Context, c *Config) context.Context {
	return context.WithValue(ctx, cfgKey{}, c)
}

// Store keeps the latest valid config-contour and config-network. A
// malformed ConfigMap is rejected by the watcher with an error naming the
// key, and the last valid configuration stays in force.
type Store struct {
	*configmap.UntypedStore
}

// NewStore returns a Store; onInvalid (may be nil) is told of each rejected
// ConfigMap, so that the rejection can be shown where an operator looks (an
// event on the ConfigMap), not only in the controller's log; onAfterStore
// runs after each accepted change (the controller uses it to resync every
// KIngress).
func NewStore(logger configmap.Logger, onInvalid func(*corev1.ConfigMap, error), onAfterStore ...func(name string, value interface{})) *Store {
	return &Store{
		UntypedStore: configmap.NewUntypedStore(
			"hitless",
			logger,
			configmap.Constructors{
				ContourConfigName:    reportInvalid(NewContourFromConfigMap, onInvalid),
				netcfg.ConfigMapName: reportInvalid(netcfg.NewConfigFromConfigMap, onInvalid),
			},
			onAfterStore...,
		),
	}
}

// reportInvalid wraps a ConfigMap constructor so that its errors also reach
// onInvalid; the error still goes back to the store, which keeps the last
// valid value.
func reportInvalid[T any](parse func(*corev1.ConfigMap) (T, error), onInvalid func(*corev1.ConfigMap, error)) func(*corev1.ConfigMap) (T, error) {
	return func(cm *corev1.ConfigMap) (T, error) {
		v, err := parse(cm)
		if err != nil && onInvalid != nil {
			onInvalid(cm, err)
		}
		return v, err
	}
}

// ToContext attaches the current configuration to ctx.
func (s *Store) ToContext(ctx context.Context) context.Context {
	return ToContext(ctx, s.Load())
}

// Load returns the current configuration.
func (s *Store) Load() *Config {
	c := &Config{}
	if v, ok := s.UntypedLoad(ContourConfigName).(*Contour); ok && v != nil {
		c.Contour = v
	} else {
		c.Contour = DefaultContour()
	}
	if v, ok := s.UntypedLoad(netcfg.ConfigMapName).(*netcfg.Config); ok && v != nil {
		c.Network = v
	} else {
		c.Network, _ = netcfg.NewConfigFromMap(nil)
	}
	return c
}
