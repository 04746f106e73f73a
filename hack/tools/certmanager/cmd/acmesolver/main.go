// Command acmesolver answers one ACME HTTP-01 challenge: the pod cert-manager's
// challenges controller starts for each challenge runs it, with the flags that
// controller passes (cert-manager's solver pod spec, pkg/issuer/acme/http).
// The answering is cert-manager's own (pkg/issuer/acme/http/solver); this is
// only the main that cert-manager's unserved cmd/acmesolver module would be.
package main

import (
	"errors"
	"flag"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"github.com/cert-manager/cert-manager/pkg/issuer/acme/http/solver"
	"k8s.io/klog/v2"
)

func main() {
	s := &solver.HTTP01Solver{}
	flag.IntVar(&s.ListenPort, "listen-port", 8089, "port to answer the challenge on")
	flag.StringVar(&s.Domain, "domain", "", "the domain name being validated")
	flag.StringVar(&s.Token, "token", "", "the challenge token")
	flag.StringVar(&s.Key, "key", "", "the challenge key (the answer)")
	flag.Parse()
	log := klog.Background().WithName("acmesolver")
	if s.Domain == "" || s.Token == "" || s.Key == "" {
		log.Error(nil, "--domain, --token and --key are all required")
		os.Exit(2)
	}

	// The challenges controller deletes the pod once the challenge is
	// decided: stop listening on SIGTERM, as its own command does.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	go func() {
		<-sig
		_ = s.Close()
	}()
	if err := s.Listen(log); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Error(err, "solver stopped")
		os.Exit(1)
	}
}
