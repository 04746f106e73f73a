// Command nodeagent is the hitless local cluster's kubelet: a virtual-kubelet
// provider that registers one node and runs the pods scheduled to it as local
// processes, each pod in its own network namespace attached through CNI, with
// its own mount namespace that shows volumes at their mount paths.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	vklog "github.com/virtual-kubelet/virtual-kubelet/log"
	"github.com/virtual-kubelet/virtual-kubelet/node"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"
)

func main() {
	if len(os.Args) == 3 && os.Args[1] == initArg {
		containerInitMain(os.Args[2])
		return
	}
	if selftestPrograms(os.Args) {
		return
	}
	var cfg config
	var selftest bool
	flag.StringVar(&cfg.kubeconfig, "kubeconfig", "", "kubeconfig of the API server")
	flag.StringVar(&cfg.nodeName, "node-name", "hitless-node", "name of the node to register")
	flag.StringVar(&cfg.nodeIP, "node-ip", "10.244.0.1", "node InternalIP and pods' hostIP (the CNI bridge address)")
	flag.StringVar(&cfg.podCIDR, "pod-cidr", "10.244.0.0/16", "the node's podCIDR")
	flag.StringVar(&cfg.cniConf, "cni-conf", "", "CNI network list (.conflist) that attaches pods")
	flag.StringVar(&cfg.cniBinDir, "cni-bin-dir", "", "directory of the CNI plugin binaries")
	flag.StringVar(&cfg.imageMapFile, "image-map", "", "JSON object from image short name to executable")
	flag.StringVar(&cfg.stateDir, "state-dir", "", "directory for pod state (volumes, working dirs, records)")
	flag.StringVar(&cfg.logDir, "log-dir", "", "directory for container logs (default <state-dir>/../logs/pods)")
	flag.StringVar(&cfg.dnsIP, "dns-ip", "10.244.0.1", "cluster DNS server for pods' resolv.conf")
	flag.StringVar(&cfg.clusterDomain, "cluster-domain", "cluster.local", "cluster DNS domain")
	flag.StringVar(&cfg.kubernetesHost, "kubernetes-service-host", "10.96.0.1", "KUBERNETES_SERVICE_HOST for containers")
	flag.StringVar(&cfg.kubernetesPort, "kubernetes-service-port", "443", "KUBERNETES_SERVICE_PORT for containers")
	flag.StringVar(&cfg.cpu, "cpu", "32", "node CPU capacity")
	flag.StringVar(&cfg.memory, "memory", "64Gi", "node memory capacity")
	flag.IntVar(&cfg.maxPods, "max-pods", 500, "node pod capacity")
	flag.IntVar(&cfg.kubeletPort, "kubelet-port", 10250, "port of the kubelet API (logs, exec) on the node IP; 0 disables it")
	flag.BoolVar(&selftest, "selftest", false, "without an API server: run two pods' processes on a test bridge, check them and clean up")
	flag.Parse()

	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})))
	vklog.L = vkLogger{slog.Default()}
	if cfg.logDir == "" && cfg.stateDir != "" {
		cfg.logDir = filepath.Join(filepath.Dir(filepath.Clean(cfg.stateDir)), "logs", "pods")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	var err error
	if selftest {
		err = runSelftest(ctx, cfg)
	} else {
		err = run(ctx, cfg)
	}
	if err != nil {
		slog.Error("nodeagent failed", "err", err)
		os.Exit(1)
	}
}

func (c config) validate() error {
	for name, v := range map[string]string{"--kubeconfig": c.kubeconfig, "--cni-conf": c.cniConf, "--cni-bin-dir": c.cniBinDir,
		"--image-map": c.imageMapFile, "--state-dir": c.stateDir} {
		if v == "" {
			return fmt.Errorf("%s is required", name)
		}
	}
	return nil
}

func run(ctx context.Context, cfg config) error {
	if err := cfg.validate(); err != nil {
		return err
	}
	if _, err := loadImageMap(cfg.imageMapFile); err != nil {
		return err
	}
	for _, d := range []string{cfg.stateDir, cfg.logDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	lock, err := lockStateDir(ctx, cfg.stateDir, 60*time.Second)
	if err != nil {
		return err
	}
	defer lock.Close()
	restCfg, err := clientcmd.BuildConfigFromFlags("", cfg.kubeconfig)
	if err != nil {
		return fmt.Errorf("failed to load kubeconfig: %w", err)
	}
	restCfg.QPS, restCfg.Burst = 100, 200
	restCfg.UserAgent = "hitless-nodeagent"
	client, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return err
	}
	netw, err := newNetwork(cfg.cniConf, cfg.cniBinDir, filepath.Join(cfg.stateDir, "cni-cache"))
	if err != nil {
		return err
	}
	a := newAgent(cfg, client, netw)
	a.cleanupLeftovers(ctx)

	version := "v0.0.0-hitless"
	if v, err := client.Discovery().ServerVersion(); err == nil {
		version = v.GitVersion
	}
	nc, err := node.NewNodeController(nodeProvider{}, buildNode(cfg, version), client.CoreV1().Nodes(),
		node.WithNodeEnableLeaseV1(client.CoordinationV1().Leases(corev1.NamespaceNodeLease), 40),
		node.WithNodeStatusUpdateInterval(30*time.Second))
	if err != nil {
		return err
	}
	go nc.Run(ctx) //nolint:errcheck // reported through nc.Err
	select {
	case <-nc.Ready():
		if err := removeConditionTaints(ctx, client.CoreV1().Nodes(), cfg.nodeName); err != nil {
			slog.Warn("could not remove condition taints", "err", err)
		}
		go untaintNode(ctx, client.CoreV1().Nodes(), cfg.nodeName)
		slog.Info("node registered", "node", cfg.nodeName)
	case <-nc.Done():
		return fmt.Errorf("node controller: %w", nc.Err())
	case <-ctx.Done():
		return nil
	}

	podInformers := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", cfg.nodeName).String()
		}))
	// The pod controller requires these informers but only reads them to
	// resolve env, which the agent does itself: they are never started.
	unused := informers.NewSharedInformerFactory(client, 0)
	broadcaster := record.NewBroadcaster()
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	recorder := broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "hitless-nodeagent", Host: cfg.nodeName})
	pc, err := node.NewPodController(node.PodControllerConfig{
		PodClient:                 client.CoreV1(),
		PodInformer:               podInformers.Core().V1().Pods(),
		EventRecorder:             recorder,
		Provider:                  a,
		ConfigMapInformer:         unused.Core().V1().ConfigMaps(),
		SecretInformer:            unused.Core().V1().Secrets(),
		ServiceInformer:           unused.Core().V1().Services(),
		SkipDownwardAPIResolution: true,
	})
	if err != nil {
		return err
	}
	podInformers.Start(ctx.Done())
	pcCtx, stopPC := context.WithCancel(context.Background())
	defer stopPC()
	go pc.Run(pcCtx, 8) //nolint:errcheck // reported through pc.Err
	if cfg.kubeletPort > 0 {
		go a.serveKubeletAPI(ctx, podInformers.Core().V1().Pods().Lister())
	}
	select {
	case <-pc.Ready():
		slog.Info("pod controller ready")
	case <-pc.Done():
		return fmt.Errorf("pod controller: %w", pc.Err())
	case <-ctx.Done():
	}
	<-ctx.Done()
	slog.Info("shutting down: stopping pods")
	stopPC()
	a.shutdown(5 * time.Second)
	slog.Info("all pods stopped")
	return nil
}
