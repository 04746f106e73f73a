package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestExpandVars(t *testing.T) {
	lookup := envLookup([]string{"POD_IP=10.244.0.5", "PORT=8080", "EMPTY=", "PORT=9090"})
	tests := []struct {
		name, in, want string
	}{
		{"no reference", "plain text", "plain text"},
		{"one reference", "$(POD_IP)", "10.244.0.5"},
		{"references inside text", "http://$(POD_IP):$(PORT)/", "http://10.244.0.5:9090/"},
		{"later definition wins", "$(PORT)", "9090"},
		{"defined as empty", "[$(EMPTY)]", "[]"},
		{"undefined reference stays", "$(MISSING)-x", "$(MISSING)-x"},
		{"escaped reference is literal", "$$(PORT)", "$(PORT)"},
		{"double dollar alone is one dollar", "cost: $$5", "cost: $5"},
		{"dollar before another character stays", "$HOME and $1", "$HOME and $1"},
		{"trailing dollar stays", "ends with $", "ends with $"},
		{"unterminated reference stays", "$(PORT", "$(PORT"},
		{"a name runs to the first closing parenthesis", "$($(PORT)", "$($(PORT)"},
		{"empty name is undefined", "$()", "$()"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, expandVars(tc.in, lookup)); diff != "" {
				t.Errorf("expandVars(%q) (-want +got):\n%s", tc.in, diff)
			}
		})
	}
}
