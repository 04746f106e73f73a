package probe

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestOptionsFromEnv(t *testing.T) {
	defaults := Options{}.withDefaults()
	for _, tc := range []struct {
		name    string
		env     map[string]string
		want    Options
		wantErr bool
	}{
		{name: "nothing set", want: defaults},
		{name: "Knative's cap", env: map[string]string{EnvBackoffMaxSeconds: "5"}, want: func() Options {
			o := defaults
			o.BackoffMax = 5 * time.Second
			return o
		}()},
		{name: "all set", env: map[string]string{EnvBackoffMaxSeconds: "2", EnvBackoffInitial: "10ms", EnvTimeout: "500ms", EnvPerPod: "4"},
			want: func() Options {
				o := defaults
				o.BackoffMax, o.BackoffInitial, o.Timeout, o.PerPod = 2*time.Second, 10*time.Millisecond, 500*time.Millisecond, 4
				return o
			}()},
		{name: "cap not a number", env: map[string]string{EnvBackoffMaxSeconds: "1s"}, wantErr: true},
		{name: "cap zero", env: map[string]string{EnvBackoffMaxSeconds: "0"}, wantErr: true},
		{name: "initial not a duration", env: map[string]string{EnvBackoffInitial: "10"}, wantErr: true},
		{name: "timeout negative", env: map[string]string{EnvTimeout: "-1s"}, wantErr: true},
		{name: "per pod zero", env: map[string]string{EnvPerPod: "0"}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := OptionsFromEnv(func(k string) string { return tc.env[k] })
			if (err != nil) != tc.wantErr {
				t.Fatalf("OptionsFromEnv() error = %v, want error %v", err, tc.wantErr)
			}
			if !tc.wantErr {
				if diff := cmp.Diff(tc.want, got); diff != "" {
					t.Errorf("OptionsFromEnv() (-want, +got):\n%s", diff)
				}
			}
		})
	}
}
