package contour

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrs "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/hitless/hitless/pkg/probekey"
)

// ProbeKeySecret is the Secret, in the controller's namespace, that holds
// the key of the prober's tokens (probekey). No manifest ships it: a key
// written in a release would be everyone's. The first replica to start
// creates it with a random key; every other replica, and every restart,
// reads that one, so the tokens in the proxies written before stay valid.
const ProbeKeySecret = "hitless-probe-key"

// probeKeyField is the Secret's data key.
const probeKeyField = "key"

// loadProbeKey reads the probe key, creating it when nobody has yet. Two
// replicas starting at once both try to create it; the loser reads the
// winner's.
func loadProbeKey(ctx context.Context, client kubernetes.Interface, namespace string) (probekey.Key, error) {
	secrets := client.CoreV1().Secrets(namespace)
	s, err := secrets.Get(ctx, ProbeKeySecret, metav1.GetOptions{})
	if apierrs.IsNotFound(err) {
		k, kerr := probekey.New()
		if kerr != nil {
			return nil, kerr
		}
		s, err = secrets.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{
				Name:      ProbeKeySecret,
				Namespace: namespace,
				Labels:    map[string]string{"app.kubernetes.io/name": "hitless"},
			},
			Type: corev1.SecretTypeOpaque,
			Data: map[string][]byte{probeKeyField: k},
		}, metav1.CreateOptions{})
		if apierrs.IsAlreadyExists(err) {
			s, err = secrets.Get(ctx, ProbeKeySecret, metav1.GetOptions{})
		}
	}
	if err != nil {
		return nil, fmt.Errorf("failed to read or create Secret %s/%s (the prober's key): %w", namespace, ProbeKeySecret, err)
	}
	k, err := probekey.Parse(s.Data[probeKeyField])
	if err != nil {
		return nil, fmt.Errorf("Secret %s/%s: %w: delete it and restart the controller to have a new key made", namespace, ProbeKeySecret, err)
	}
	return k, nil
}
