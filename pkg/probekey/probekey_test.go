package probekey

import (
	"bytes"
	"context"
	"testing"
)

func TestTokenIsPerNamespaceAndKey(t *testing.T) {
	k1 := Key(bytes.Repeat([]byte{1}, Size))
	k2 := Key(bytes.Repeat([]byte{2}, Size))
	a1, err := k1.Token("a")
	if err != nil {
		t.Fatal(err)
	}
	again, _ := k1.Token("a")
	b1, _ := k1.Token("b")
	a2, _ := k2.Token("a")
	if a1 != again {
		t.Errorf("the same key and namespace gave %q then %q: replicas and restarts would disagree", a1, again)
	}
	if a1 == b1 {
		t.Error("two namespaces share a token: one namespace's proxies would open the other's probe routes")
	}
	if a1 == a2 {
		t.Error("two keys give the same token")
	}
	if len(a1) != 64 {
		t.Errorf("token %q is not 32 hex bytes", a1)
	}
}

func TestNoKeyNoToken(t *testing.T) {
	for _, k := range []Key{nil, Key("short")} {
		if tok, err := k.Token("a"); err == nil {
			t.Errorf("key of %d bytes gave token %q, want an error", len(k), tok)
		}
	}
	if _, err := Parse([]byte("short")); err == nil {
		t.Error("Parse took a short key")
	}
}

func TestNewAndContext(t *testing.T) {
	k, err := New()
	if err != nil {
		t.Fatal(err)
	}
	other, _ := New()
	if bytes.Equal(k, other) {
		t.Error("two new keys are equal")
	}
	if got := FromContext(WithKey(context.Background(), k)); !bytes.Equal(got, k) {
		t.Errorf("FromContext = %x, want %x", got, k)
	}
	if got := FromContext(context.Background()); got != nil {
		t.Errorf("FromContext of a bare context = %x, want none", got)
	}
}
