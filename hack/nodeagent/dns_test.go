package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const hostResolv = "# host file\nnameserver 192.0.2.53\nsearch corp.example\noptions edns0\n"

func dnsPod(mutate func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "serving-tests"}}
	if mutate != nil {
		mutate(p)
	}
	return p
}

func TestResolvConf(t *testing.T) {
	two := "2"
	tests := []struct {
		name string
		pod  *corev1.Pod
		want string
	}{{
		name: "default policy uses cluster DNS with the namespace search path",
		pod:  dnsPod(nil),
		want: "nameserver 10.244.0.1\nsearch serving-tests.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5\n",
	}, {
		name: "host network pod with ClusterFirst gets the host's settings",
		pod:  dnsPod(func(p *corev1.Pod) { p.Spec.HostNetwork = true; p.Spec.DNSPolicy = corev1.DNSClusterFirst }),
		want: "nameserver 192.0.2.53\nsearch corp.example\noptions edns0\n",
	}, {
		name: "host network pod with ClusterFirstWithHostNet uses cluster DNS",
		pod:  dnsPod(func(p *corev1.Pod) { p.Spec.HostNetwork = true; p.Spec.DNSPolicy = corev1.DNSClusterFirstWithHostNet }),
		want: "nameserver 10.244.0.1\nsearch serving-tests.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5\n",
	}, {
		name: "policy Default copies the host",
		pod:  dnsPod(func(p *corev1.Pod) { p.Spec.DNSPolicy = corev1.DNSDefault }),
		want: "nameserver 192.0.2.53\nsearch corp.example\noptions edns0\n",
	}, {
		name: "policy None takes only dnsConfig",
		pod: dnsPod(func(p *corev1.Pod) {
			p.Spec.DNSPolicy = corev1.DNSNone
			p.Spec.DNSConfig = &corev1.PodDNSConfig{Nameservers: []string{"10.0.0.10"}, Searches: []string{"a.example"}}
		}),
		want: "nameserver 10.0.0.10\nsearch a.example\n",
	}, {
		name: "dnsConfig adds to cluster DNS and overrides an option",
		pod: dnsPod(func(p *corev1.Pod) {
			p.Spec.DNSConfig = &corev1.PodDNSConfig{
				Nameservers: []string{"10.244.0.1", "10.0.0.10"},
				Searches:    []string{"extra.example"},
				Options:     []corev1.PodDNSConfigOption{{Name: "ndots", Value: &two}, {Name: "single-request"}},
			}
		}),
		want: "nameserver 10.244.0.1\nnameserver 10.0.0.10\n" +
			"search serving-tests.svc.cluster.local svc.cluster.local cluster.local extra.example\n" +
			"options ndots:2 single-request\n",
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := resolvConf(tc.pod, "10.244.0.1", "cluster.local", []byte(hostResolv))
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("resolvConf() (-want +got):\n%s", diff)
			}
		})
	}
}

func TestHostsFile(t *testing.T) {
	header := "# Kubernetes-managed hosts file (hitless node agent).\n127.0.0.1\tlocalhost\n" +
		"::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\n" +
		"fe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n"
	tests := []struct {
		name string
		pod  *corev1.Pod
		want string
	}{{
		name: "pod name at the pod IP",
		pod:  dnsPod(nil),
		want: header + "10.244.0.7\tweb-1\n",
	}, {
		name: "hostname and subdomain give an FQDN",
		pod:  dnsPod(func(p *corev1.Pod) { p.Spec.Hostname = "db-0"; p.Spec.Subdomain = "db" }),
		want: header + "10.244.0.7\tdb-0.db.serving-tests.svc.cluster.local\tdb-0\n",
	}, {
		name: "host aliases are appended",
		pod: dnsPod(func(p *corev1.Pod) {
			p.Spec.HostAliases = []corev1.HostAlias{{IP: "10.1.2.3", Hostnames: []string{"foo.local", "bar.local"}}}
		}),
		want: header + "10.244.0.7\tweb-1\n\n# Entries added by HostAliases.\n10.1.2.3\tfoo.local\tbar.local\n",
	}, {
		name: "host network pods see the host's file",
		pod:  dnsPod(func(p *corev1.Pod) { p.Spec.HostNetwork = true }),
		want: "127.0.0.1 localhost\n",
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := hostsFile(tc.pod, "10.244.0.7", "cluster.local", []byte("127.0.0.1 localhost"))
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("hostsFile() (-want +got):\n%s", diff)
			}
		})
	}
}
