package contour

import (
	"context"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"knative.dev/networking/pkg/apis/networking"
	"knative.dev/networking/pkg/apis/networking/v1alpha1"
	netclient "knative.dev/networking/pkg/client/injection/client"
	certificateinformer "knative.dev/networking/pkg/client/injection/informers/networking/v1alpha1/certificate"
	ingressinformer "knative.dev/networking/pkg/client/injection/informers/networking/v1alpha1/ingress"
	ingressreconciler "knative.dev/networking/pkg/client/injection/reconciler/networking/v1alpha1/ingress"
	netlisters "knative.dev/networking/pkg/client/listers/networking/v1alpha1"
	netcfg "knative.dev/networking/pkg/config"
	kubeclient "knative.dev/pkg/client/injection/kube/client"
	serviceinformer "knative.dev/pkg/client/injection/kube/informers/core/v1/service"
	endpointsliceinformer "knative.dev/pkg/client/injection/kube/informers/discovery/v1/endpointslice"
	"knative.dev/pkg/configmap"
	"knative.dev/pkg/controller"
	"knative.dev/pkg/logging"
	pkgreconciler "knative.dev/pkg/reconciler"
	"knative.dev/pkg/system"

	contourclient "github.com/hitless/hitless/pkg/client/injection/client"
	proxyinformer "github.com/hitless/hitless/pkg/client/injection/informers/projectcontour/v1/httpproxy"
	"github.com/hitless/hitless/pkg/config"
	"github.com/hitless/hitless/pkg/probe"
	"github.com/hitless/hitless/pkg/probekey"
)

// DefaultIngressClass is the KIngress class hitless serves unless told otherwise.
const DefaultIngressClass = "contour.ingress.networking.knative.dev"

// NewController wires the reconciler for the default class.
func NewController(ctx context.Context, cmw configmap.Watcher) *controller.Impl {
	return NewControllerForClass(ctx, cmw, DefaultIngressClass)
}

// NewControllerForClass wires informers, the config store and the prober to
// a reconciler of KIngresses of the given class. A change of config-contour
// or config-network re-reconciles every KIngress of the class.
func NewControllerForClass(ctx context.Context, cmw configmap.Watcher, class string) *controller.Impl {
	logger := logging.FromContext(ctx)
	// One recorder for the generated reconciler (it takes the one in ctx)
	// and for the events this wiring records itself.
	recorder := controller.GetEventRecorder(ctx)
	if recorder == nil {
		recorder = newEventRecorder(ctx)
		ctx = controller.WithEventRecorder(ctx, recorder)
	}

	ingInformer := ingressinformer.Get(ctx)
	proxyInf := proxyinformer.Get(ctx)
	serviceInf := serviceinformer.Get(ctx)
	sliceInf := endpointsliceinformer.Get(ctx)
	certInf := certificateinformer.Get(ctx)

	prepareInformers(ctx, proxyInf.Informer(), ingInformer.Informer(), serviceInf.Informer(), sliceInf.Informer(), certInf.Informer())
	probeKey := waitForProbeKey(ctx)
	// Serving's routing CA, copied without its key for the proxies to name.
	watchRoutingCA(ctx, logger, kubeclient.Get(ctx), system.Namespace())

	m := newMetrics()
	targets := &envoyTargets{services: serviceInf.Lister(), endpointSlices: sliceInf.Lister(),
		accepts: newListenCheck().accepts}
	r := &Reconciler{
		contourClient: contourclient.Get(ctx),
		netClient:     netclient.Get(ctx),
		proxyLister:   proxyInf.Lister(),
		proxyIndexer:  proxyInf.Informer().GetIndexer(),
		ingressLister: ingInformer.Lister(),
		serviceLister: serviceInf.Lister(),
		certLister:    certInf.Lister(),
		targets:       targets,
		clock:         time.Now,
		metrics:       m,
		probeKey:      probeKey,
		deleted:       newDeletedProxies(),
	}

	var store *config.Store
	impl := ingressreconciler.NewImpl(ctx, r, class, func(impl *controller.Impl) controller.Options {
		store = newConfigStore(ctx, recorder, func() {
			impl.FilteredGlobalResync(classFilter(class), ingInformer.Informer())
		})
		store.WatchConfigs(cmw)
		return controller.Options{ConfigStore: store, PromoteFilterFunc: classFilter(class),
			DemoteFunc: func(b pkgreconciler.Bucket) { r.forgetBucket(b) }}
	})
	retry, err := newUnavailableRetry(impl.Reconciler)
	if err != nil {
		logger.Fatalw("Cannot wrap the KIngress reconciler", "error", err)
	}
	impl.Reconciler = retry
	r.enqueueAfter = impl.EnqueueAfter
	r.tracker = impl.Tracker

	// The prober calls back when a round is confirmed on every pod; both
	// rounds of a KIngress map back to its key.
	probeOpts, err := probe.OptionsFromEnv(os.Getenv)
	if err != nil {
		logger.Fatalw("Invalid prober setting in the controller's environment", "error", err)
	}
	probeOpts.Key = probeKey
	prober := probe.New(logger.Named("prober"), targets, func(key probe.RoundKey) {
		impl.EnqueueKey(key.NamespacedName)
	}, probeOpts)
	prober.Start(ctx.Done())
	r.prober = prober

	ingInformer.Informer().AddEventHandler(cache.FilteringResourceEventHandler{
		FilterFunc: classFilter(class),
		Handler:    controller.HandleAll(impl.Enqueue),
	})
	proxyInf.Informer().AddEventHandler(cache.FilteringResourceEventHandler{
		FilterFunc: controller.FilterController(&v1alpha1.Ingress{}),
		Handler:    controller.HandleAll(impl.EnqueueControllerOf),
	})
	proxyInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{DeleteFunc: r.deleted.forget})

	// A Knative Certificate that starts or stops renewing changes what its
	// Route's KIngresses serve (resources.HoldRenewingTLS).
	certInf.Informer().AddEventHandler(controller.HandleAll(enqueueSameController(ingInformer.Lister(), classFilter(class), impl.Enqueue)))

	serviceInf.Informer().AddEventHandler(controller.HandleAll(controller.EnsureTypeMeta(
		impl.Tracker.OnChanged, corev1.SchemeGroupVersion.WithKind("Service"))))

	restart := restartInFlight(impl, ingInformer.Lister(), class)
	sliceInf.Informer().AddEventHandler(cache.FilteringResourceEventHandler{
		FilterFunc: ofFleet(store),
		Handler:    controller.HandleAll(func(interface{}) { restart() }),
	})
	// A not ready Envoy pod that starts or stops accepting connections
	// changes who must confirm without any slice event.
	targets.onChange = restart

	return impl
}

// enqueueSameController enqueues the KIngresses of the class that have the
// same controller (the Route) as a Knative Certificate.
func enqueueSameController(ings netlisters.IngressLister, inClass func(interface{}) bool, enqueue func(interface{})) func(interface{}) {
	return func(obj interface{}) {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		c, ok := obj.(*v1alpha1.Certificate)
		if !ok {
			return
		}
		owner := metav1.GetControllerOf(c)
		if owner == nil {
			return
		}
		list, err := ings.Ingresses(c.Namespace).List(labels.Everything())
		if err != nil {
			return
		}
		for _, ing := range list {
			if o := metav1.GetControllerOf(ing); o != nil && o.UID == owner.UID && inClass(ing) {
				enqueue(ing)
			}
		}
	}
}

// prepareInformers trims every object before it reaches the caches
// (trimForCache; an HTTPProxy also shares what it has equal with the other
// proxies of its KIngress: siblingSharer), and indexes HTTPProxies by host
// and by controlling KIngress.
func prepareInformers(ctx context.Context, proxies cache.SharedIndexInformer, others ...cache.SharedIndexInformer) {
	logger := logging.FromContext(ctx)
	if err := proxies.SetTransform(newSiblingSharer(proxies.GetIndexer()).transform); err != nil {
		logger.Fatalw("Failed to set an informer transform", "error", err)
	}
	for _, inf := range others {
		if err := inf.SetTransform(trimForCache); err != nil {
			logger.Fatalw("Failed to set an informer transform", "error", err)
		}
	}
	if err := proxies.AddIndexers(cache.Indexers{fqdnIndex: indexFqdn, controllerIndex: indexController}); err != nil {
		logger.Fatalw("Failed to index HTTPProxies by host and controller", "error", err)
	}
}

// waitForProbeKey loads the key of the prober's tokens (creating it on
// the first start), before anything is written with it; the controller
// cannot serve without it.
func waitForProbeKey(ctx context.Context) probekey.Key {
	logger := logging.FromContext(ctx)
	var key probekey.Key
	if err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		k, err := loadProbeKey(ctx, kubeclient.Get(ctx), system.Namespace())
		if err != nil {
			logger.Warnw("Cannot load the probe key yet", "error", err)
			return false, nil
		}
		key = k
		return true, nil
	}); err != nil {
		logger.Fatalw("Failed to load the probe key", "secret", system.Namespace()+"/"+ProbeKeySecret, "error", err)
	}
	return key
}

// newConfigStore watches config-contour and config-network, calling resync
// when either changes. A rejected ConfigMap keeps the last valid
// configuration in force and gets a Warning event that says which key to
// fix; an accepted config-contour with warnings (a key or field it ignores,
// a spelling to change) gets a Warning event for each.
func newConfigStore(ctx context.Context, recorder record.EventRecorder, resync func()) *config.Store {
	invalid := func(cm *corev1.ConfigMap, err error) {
		recorder.Eventf(cm, corev1.EventTypeWarning, ReasonInvalidConfig,
			"ConfigMap %s/%s rejected, the last valid configuration stays in force: %v", cm.Namespace, cm.Name, err)
	}
	warned := func(cm *corev1.ConfigMap, warnings []string) {
		for _, w := range warnings {
			recorder.Eventf(cm, corev1.EventTypeWarning, reasonConfigWarning,
				"ConfigMap %s/%s accepted with a warning: %s", cm.Namespace, cm.Name, w)
		}
	}
	onChange := configmap.TypeFilter(&config.Contour{}, &netcfg.Config{})(func(string, interface{}) { resync() })
	return config.NewStore(logging.FromContext(ctx).Named("config-store"), invalid, warned, onChange)
}

// restartInFlight returns what reconciles the rollouts in flight when Envoy
// pods come or go: the prober brings their rounds up to date with the
// fleet, so a new pod must confirm and a gone one is forgotten, and the
// pods that already confirmed need not again. Ready KIngresses are left
// alone: a new pod gets Contour's whole state.
func restartInFlight(impl *controller.Impl, lister netlisters.IngressLister, class string) func() {
	return func() {
		ings, err := lister.List(labels.Everything())
		if err != nil {
			return
		}
		for _, ing := range ings {
			if !classFilter(class)(ing) || ing.IsReady() {
				continue
			}
			impl.Enqueue(ing)
		}
	}
}

// ofFleet passes the EndpointSlices of the configured fleets' Envoy
// Services.
func ofFleet(store *config.Store) func(interface{}) bool {
	return func(obj interface{}) bool {
		s, ok := obj.(*discoveryv1.EndpointSlice)
		if !ok {
			return false
		}
		svc := types.NamespacedName{Namespace: s.Namespace, Name: s.Labels[discoveryv1.LabelServiceName]}
		for _, f := range store.Load().Contour.Fleets() {
			if f.Service == svc {
				return true
			}
		}
		return false
	}
}

// classFilter passes KIngresses of the class, and the last known state of
// one deleted while the informer was disconnected (a tombstone), so that
// its deletion reaches ObserveDeletion too.
func classFilter(class string) func(interface{}) bool {
	of := pkgreconciler.AnnotationFilterFunc(networking.IngressClassAnnotationKey, class, false)
	return func(obj interface{}) bool {
		if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tombstone.Obj
		}
		return of(obj)
	}
}

// reasonConfigWarning is the Warning event on an accepted config-contour
// that holds keys or fields hitless ignores (config.Contour.Warnings).
const reasonConfigWarning = "ConfigWarning"

// newEventRecorder records events to the API as the controller's component,
// until ctx is done.
func newEventRecorder(ctx context.Context) record.EventRecorder {
	broadcaster := record.NewBroadcaster()
	sink := broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kubeclient.Get(ctx).CoreV1().Events("")})
	go func() {
		<-ctx.Done()
		sink.Stop()
	}()
	return broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "hitless-controller"})
}
