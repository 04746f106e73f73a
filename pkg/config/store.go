package config

import (
	"context"

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

// NewStore returns a Store; onAfterStore runs after each accepted change
// (the controller uses it to resync every KIngress).
func NewStore(logger configmap.Logger, onAfterStore ...func(name string, value interface{})) *Store {
	return &Store{
		UntypedStore: configmap.NewUntypedStore(
			"hitless",
			logger,
			configmap.Constructors{
				ContourConfigName:    NewContourFromConfigMap,
				netcfg.ConfigMapName: netcfg.NewConfigFromConfigMap,
			},
			onAfterStore...,
		),
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
