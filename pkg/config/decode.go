package config

import (
	"reflect"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

// decodeLenient decodes the YAML value raw into out (a pointer to a struct)
// the way net-contour decodes its config-contour values: fields are matched
// to out's JSON names ignoring case, and a field that matches none is
// dropped. A config that net-contour loads must load here too, so such a
// field cannot refuse the ConfigMap; it is returned instead, sorted, for the
// caller to report as ignored.
func decodeLenient(raw string, out any) ([]string, error) {
	if err := yaml.Unmarshal([]byte(raw), out); err != nil {
		return nil, err
	}
	// out decoded, so raw is a mapping (or null, which has no fields).
	var fields map[string]any
	if err := yaml.Unmarshal([]byte(raw), &fields); err != nil {
		return nil, err
	}
	known := jsonNames(reflect.TypeOf(out).Elem())
	var unknown []string
	for name := range fields {
		if !knownName(name, known) {
			unknown = append(unknown, name)
		}
	}
	sort.Strings(unknown)
	return unknown, nil
}

// knownName reports whether encoding/json, which matches field names
// ignoring case, would decode the field name into one of known.
func knownName(name string, known []string) bool {
	for _, k := range known {
		if strings.EqualFold(name, k) {
			return true
		}
	}
	return false
}

// jsonNames lists the JSON field names of the struct type t, those of
// embedded structs without a name of their own included, as encoding/json
// sees them.
func jsonNames(t reflect.Type) []string {
	var names []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case name == "-":
		case name == "" && f.Anonymous && f.Type.Kind() == reflect.Struct:
			names = append(names, jsonNames(f.Type)...)
		case name == "" && f.IsExported():
			names = append(names, f.Name)
		case name != "":
			names = append(names, name)
		}
	}
	return names
}
