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

// NewStore returns a Store. Both callbacks may be nil and exist so that
// what the store finds can be shown where an operator looks (an event on
// the ConfigMap), not only in the controller's log: onInvalid is told of
// each rejected ConfigMap; onWarnings of each accepted config-contour that
// has warnings (ignored keys or fields, see Contour.Warnings), after the
// store has logged them. onAfterStore runs after each accepted change (the
// controller uses it to resync every KIngress).
func NewStore(logger configmap.Logger, onInvalid func(*corev1.ConfigMap, error), onWarnings func(*corev1.ConfigMap, []string),
	onAfterStore ...func(name string, value interface{})) *Store {
	return &Store{
		UntypedStore: configmap.NewUntypedStore(
			"hitless",
			logger,
			configmap.Constructors{
				ContourConfigName:    reportWarnings(reportInvalid(NewContourFromConfigMap, onInvalid), logger, onWarnings),
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

// warnLogger is the part of a zap SugaredLogger that configmap.Logger
// lacks; a logger without it logs warnings at info level.
type warnLogger interface {
	Warnf(string, ...interface{})
}

// reportWarnings wraps the config-contour constructor so that the warnings
// of an accepted ConfigMap are logged and reach onWarnings; the value is
// stored as parsed.
func reportWarnings(parse func(*corev1.ConfigMap) (*Contour, error), logger configmap.Logger,
	onWarnings func(*corev1.ConfigMap, []string)) func(*corev1.ConfigMap) (*Contour, error) {
	warnf := logger.Infof
	if w, ok := logger.(warnLogger); ok {
		warnf = w.Warnf
	}
	return func(cm *corev1.ConfigMap) (*Contour, error) {
		c, err := parse(cm)
		if err != nil || len(c.Warnings) == 0 {
			return c, err
		}
		for _, w := range c.Warnings {
			warnf("ConfigMap %s/%s accepted with a warning: %s", cm.Namespace, cm.Name, w)
		}
		if onWarnings != nil {
			onWarnings(cm, c.Warnings)
		}
		return c, nil
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
