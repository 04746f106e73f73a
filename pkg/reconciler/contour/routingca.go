package contour

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrs "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"knative.dev/networking/pkg/certificates"
	netcfg "knative.dev/networking/pkg/config"

	"github.com/hitless/hitless/pkg/resources"
)

// The routing CA's copy. Under system-internal-tls every proxy validates
// its backends against Serving's routing CA, and Contour lets a proxy name
// a Secret of another namespace only when that namespace delegates it to
// the proxy's. Serving's Secret (routing-serving-certs) holds the CA's
// certificate beside a certificate and key of its own, and a delegation
// hands over the whole Secret: any proxy of any namespace could then serve
// that key as its own TLS certificate. So hitless copies the CA's
// certificate alone into a Secret of its own, resources.RoutingCASecret,
// and config/ delegates that one.

// mirrorRoutingCA makes the copy hold the source's CA certificate: creates
// it, or updates it when the CA changed. A source without one is left
// alone, and so is the copy (a half-written Secret must not take the CA away
// from proxies that validate with it).
func mirrorRoutingCA(ctx context.Context, client kubernetes.Interface, src *corev1.Secret) error {
	ca := src.Data[certificates.CaCertName]
	if len(ca) == 0 {
		return nil
	}
	secrets := client.CoreV1().Secrets(src.Namespace)
	cur, err := secrets.Get(ctx, resources.RoutingCASecret, metav1.GetOptions{})
	if apierrs.IsNotFound(err) {
		_, err = secrets.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: src.Namespace,
				Name:      resources.RoutingCASecret,
				Labels:    map[string]string{"app.kubernetes.io/name": "hitless"},
			},
			Type: corev1.SecretTypeOpaque,
			Data: map[string][]byte{certificates.CaCertName: ca},
		}, metav1.CreateOptions{})
		if apierrs.IsAlreadyExists(err) {
			return mirrorRoutingCA(ctx, client, src)
		}
	} else if err == nil && (len(cur.Data) != 1 || !bytes.Equal(cur.Data[certificates.CaCertName], ca)) {
		cur = cur.DeepCopy()
		cur.Data = map[string][]byte{certificates.CaCertName: ca}
		_, err = secrets.Update(ctx, cur, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("failed to copy the CA of Secret %s/%s into %s: %w", src.Namespace, src.Name, resources.RoutingCASecret, err)
	}
	return nil
}

// watchRoutingCA keeps the copy current until ctx is done. It watches
// Serving's Secret by name alone, so the controller's RBAC can name the one
// Secret it reads; every replica mirrors (the writes are idempotent).
func watchRoutingCA(ctx context.Context, logger *zap.SugaredLogger, client kubernetes.Interface, namespace string) {
	lw := cache.NewListWatchFromClient(client.CoreV1().RESTClient(), "secrets", namespace,
		fields.OneTermEqualSelector("metadata.name", netcfg.ServingRoutingCertName))
	sync := func(obj interface{}) {
		src, ok := obj.(*corev1.Secret)
		if !ok {
			return
		}
		// Retried a few times: a failed copy leaves the proxies on the
		// CA they had, and the next change of the source tries again.
		for i := 0; i < 5; i++ {
			err := mirrorRoutingCA(ctx, client, src)
			if err == nil {
				return
			}
			logger.Warnw("Cannot copy Serving's routing CA", "error", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Duration(1<<i) * time.Second):
			}
		}
	}
	_, inf := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: lw,
		ObjectType:    &corev1.Secret{},
		ResyncPeriod:  10 * time.Minute,
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    sync,
			UpdateFunc: func(_, obj interface{}) { sync(obj) },
		},
	})
	go inf.Run(ctx.Done())
}
