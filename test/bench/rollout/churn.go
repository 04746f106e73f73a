package main

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/hitless/hitless/test/harness"
)

// churnPods makes the stack "used" the way the other benchmarks and test
// suites leave it: n short-lived pods are created and deleted, 25 at a time,
// so that the node's address allocator has moved on (and, on a small pod
// range, wrapped around) and the swaps that follow get addresses other pods
// held seconds or minutes before. It returns the addresses it saw, in order.
func churnPods(ctx context.Context, c *harness.Clients, n int) ([]string, error) {
	ns, cleanup, err := c.CreateNamespace(ctx, "bench-churn")
	if err != nil {
		return nil, err
	}
	defer cleanup()
	var (
		mu  sync.Mutex
		ips []string
	)
	const batch = 25
	zero := int64(0)
	for done := 0; done < n; done += batch {
		var wg sync.WaitGroup
		errs := make(chan error, batch)
		for j := done; j < min(done+batch, n); j++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				name := fmt.Sprintf("churn-%d", j)
				pod := &corev1.Pod{
					ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
					Spec: corev1.PodSpec{
						TerminationGracePeriodSeconds: &zero,
						Containers: []corev1.Container{{
							Name: "app", Image: "ko.local/runtime",
							Env: []corev1.EnvVar{{Name: "PORT", Value: "8080"}},
						}},
					},
				}
				if _, err := c.Kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
					errs <- fmt.Errorf("create pod %s/%s: %w", ns, name, err)
					return
				}
				var ip string
				err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
					p, err := c.Kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
					if err != nil {
						return false, nil
					}
					ip = p.Status.PodIP
					return ip != "", nil
				})
				if err != nil {
					errs <- fmt.Errorf("pod %s/%s got no address: %w", ns, name, err)
					return
				}
				mu.Lock()
				ips = append(ips, ip)
				mu.Unlock()
				if err := c.Kube.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
					errs <- fmt.Errorf("delete pod %s/%s: %w", ns, name, err)
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			return ips, err
		}
		fmt.Fprintf(os.Stderr, "churn: %d/%d pods created and deleted\n", min(done+batch, n), n)
	}
	return ips, nil
}
