package probe

import (
	"fmt"
	"strconv"
	"time"
)

// The environment variables that tune the prober. The first is the name
// Knative's prober reads, with the same meaning, so a Deployment written
// for it keeps working.
const (
	EnvBackoffMaxSeconds = "PROBE_MAX_RETRY_DELAY_SECONDS"
	EnvBackoffInitial    = "PROBE_RETRY_DELAY_INITIAL"
	EnvTimeout           = "PROBE_TIMEOUT"
	EnvPerPod            = "PROBE_CONCURRENCY_PER_POD"
)

// OptionsFromEnv reads Options from the environment (getenv is os.Getenv);
// unset variables keep the defaults. An error names the variable.
func OptionsFromEnv(getenv func(string) string) (Options, error) {
	var o Options
	if v := getenv(EnvBackoffMaxSeconds); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return Options{}, fmt.Errorf("%s=%q: want a whole number of seconds above 0", EnvBackoffMaxSeconds, v)
		}
		o.BackoffMax = time.Duration(n) * time.Second
	}
	for _, d := range []struct {
		name string
		to   *time.Duration
	}{{EnvBackoffInitial, &o.BackoffInitial}, {EnvTimeout, &o.Timeout}} {
		v := getenv(d.name)
		if v == "" {
			continue
		}
		got, err := time.ParseDuration(v)
		if err != nil || got <= 0 {
			return Options{}, fmt.Errorf("%s=%q: want a duration above 0, e.g. 50ms", d.name, v)
		}
		*d.to = got
	}
	if v := getenv(EnvPerPod); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return Options{}, fmt.Errorf("%s=%q: want a number of probes above 0", EnvPerPod, v)
		}
		o.PerPod = n
	}
	return o.withDefaults(), nil
}
