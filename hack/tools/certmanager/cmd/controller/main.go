// Command controller runs cert-manager's controllers against the local
// stack's API server: the certificates, certificate requests (approver,
// self-signed, CA and ACME issuers), issuers, cluster issuers and ACME
// orders and challenges controllers, every one cert-manager's own from
// github.com/cert-manager/cert-manager/pkg/controller, registered in
// controller.Known() by the blank imports below and built by its
// ContextFactory. This is the main that cert-manager's cmd/controller module
// (not served by the module proxy) would be, minus what the stack does not
// use: leader election (one replica), the metrics and health servers, the
// ingress and gateway shims, certificate signing requests, and the Vault and
// Venafi issuers (an Issuer of those kinds is reported not ready).
package main

import (
	"context"
	"flag"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	controllerpkg "github.com/cert-manager/cert-manager/pkg/controller"
	logf "github.com/cert-manager/cert-manager/pkg/logs"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/klog/v2"

	_ "github.com/cert-manager/cert-manager/pkg/controller/acmechallenges"
	_ "github.com/cert-manager/cert-manager/pkg/controller/acmeorders"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/acme"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/approver"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/ca"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/selfsigned"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/issuing"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/keymanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/readiness"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/requestmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/revisionmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/trigger"
	_ "github.com/cert-manager/cert-manager/pkg/controller/clusterissuers"
	_ "github.com/cert-manager/cert-manager/pkg/controller/issuers"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/acme"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/ca"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/selfsigned"
)

func main() {
	opts := controllerpkg.ContextOptions{
		KubernetesAPIQPS:   20,
		KubernetesAPIBurst: 50,
		ACMEOptions: controllerpkg.ACMEOptions{
			// cert-manager's own defaults for the solver pod
			HTTP01SolverResourceRequestCPU:    resource.MustParse("10m"),
			HTTP01SolverResourceRequestMemory: resource.MustParse("64Mi"),
			HTTP01SolverResourceLimitsCPU:     resource.MustParse("100m"),
			HTTP01SolverResourceLimitsMemory:  resource.MustParse("64Mi"),
			ACMEHTTP01SolverRunAsNonRoot:      true,
			DNS01CheckRetryPeriod:             10 * time.Second,
		},
		CertificateOptions: controllerpkg.CertificateOptions{
			CopiedAnnotationPrefixes:                 []string{"*", "-kubectl.kubernetes.io/", "-fluxcd.io/", "-argocd.argoproj.io/"},
			CertificateRequestMinimumBackoffDuration: time.Hour,
			CertificateRequestMaximumBackoffDuration: 32 * time.Hour,
		},
		SchedulerOptions: controllerpkg.SchedulerOptions{MaxConcurrentChallenges: 60},
	}
	var nameservers string
	workers := 5
	flag.StringVar(&opts.Kubeconfig, "kubeconfig", "", "kubeconfig of the API server")
	flag.StringVar(&opts.ClusterResourceNamespace, "cluster-resource-namespace", "cert-manager",
		"namespace of the Secrets that ClusterIssuers refer to")
	flag.StringVar(&opts.HTTP01SolverImage, "acme-http01-solver-image", "ko.local/cert-manager/acmesolver",
		"image of the pods that answer HTTP-01 challenges")
	flag.StringVar(&nameservers, "acme-http01-solver-nameservers", "",
		"host:port of the DNS servers the HTTP-01 self-check resolves with, comma-separated (default: the system's)")
	flag.IntVar(&workers, "workers", workers, "workers per controller")
	klog.InitFlags(nil)
	flag.Parse()
	if nameservers != "" {
		opts.HTTP01SolverNameservers = strings.Split(nameservers, ",")
	}

	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer cancel()
	log := klog.Background().WithName("cert-manager")
	ctx = logf.NewContext(ctx, log)

	if err := run(ctx, opts, workers); err != nil {
		log.Error(err, "cert-manager controller failed")
		os.Exit(1)
	}
}

// run builds every registered controller from one ContextFactory (their
// informers are shared), starts the informers and runs the controllers until
// ctx ends, in the order cert-manager's own controller main does: build all,
// then start the informer factories, then run.
func run(ctx context.Context, opts controllerpkg.ContextOptions, workers int) error {
	log := logf.FromContext(ctx)
	factory, err := controllerpkg.NewContextFactory(ctx, opts)
	if err != nil {
		return err
	}
	known := controllerpkg.Known()
	names := make([]string, 0, len(known))
	for name := range known {
		names = append(names, name)
	}
	sort.Strings(names)
	controllers := make(map[string]controllerpkg.Interface, len(names))
	for _, name := range names {
		c, err := known[name](factory)
		if err != nil {
			return err
		}
		controllers[name] = c
	}
	shared, err := factory.Build()
	if err != nil {
		return err
	}
	shared.KubeSharedInformerFactory.Start(ctx.Done())
	shared.SharedInformerFactory.Start(ctx.Done())
	shared.HTTP01ResourceMetadataInformersFactory.Start(ctx.Done())
	if shared.GatewaySolverEnabled {
		shared.GWShared.Start(ctx.Done())
	}
	log.Info("starting controllers", "controllers", names)

	var wg sync.WaitGroup
	errs := make(chan error, len(controllers))
	for name, c := range controllers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.Run(workers, ctx); err != nil {
				log.Error(err, "controller stopped", "controller", name)
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}
