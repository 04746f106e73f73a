package main

import (
	"bufio"
	"bytes"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// dnsSettings is what a resolv.conf says.
type dnsSettings struct {
	nameservers []string
	searches    []string
	options     []string
}

// parseResolvConf reads nameserver, search/domain and options lines.
func parseResolvConf(raw []byte) dnsSettings {
	var s dnsSettings
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 || strings.HasPrefix(f[0], "#") || strings.HasPrefix(f[0], ";") {
			continue
		}
		switch f[0] {
		case "nameserver":
			s.nameservers = append(s.nameservers, f[1])
		case "search", "domain":
			s.searches = f[1:]
		case "options":
			s.options = append(s.options, f[1:]...)
		}
	}
	return s
}

// podHostname is the pod's hostname: spec.hostname, else its name, at most 63
// characters.
func podHostname(pod *corev1.Pod) string {
	h := pod.Spec.Hostname
	if h == "" {
		h = pod.Name
	}
	if len(h) > 63 {
		h = strings.TrimRight(h[:63], "-.")
	}
	return h
}

// usesClusterDNS reports whether the pod's dnsPolicy points it at cluster DNS.
func usesClusterDNS(pod *corev1.Pod) bool {
	switch pod.Spec.DNSPolicy {
	case corev1.DNSClusterFirstWithHostNet:
		return true
	case corev1.DNSClusterFirst, "":
		return !pod.Spec.HostNetwork
	}
	return false
}

// resolvConf renders the pod's /etc/resolv.conf from its dnsPolicy and
// dnsConfig: cluster DNS at dnsIP with the namespace's search path and
// ndots:5, the host's settings (hostResolv) for dnsPolicy Default (and host
// network pods without ClusterFirstWithHostNet), only dnsConfig for None.
func resolvConf(pod *corev1.Pod, dnsIP, clusterDomain string, hostResolv []byte) string {
	var s dnsSettings
	switch {
	case pod.Spec.DNSPolicy == corev1.DNSNone:
	case usesClusterDNS(pod):
		s = dnsSettings{
			nameservers: []string{dnsIP},
			searches: []string{
				pod.Namespace + ".svc." + clusterDomain,
				"svc." + clusterDomain,
				clusterDomain,
			},
			options: []string{"ndots:5"},
		}
	default:
		s = parseResolvConf(hostResolv)
	}
	if c := pod.Spec.DNSConfig; c != nil {
		s.nameservers = appendMissing(s.nameservers, c.Nameservers...)
		s.searches = appendMissing(s.searches, c.Searches...)
		for _, o := range c.Options {
			opt := o.Name
			if o.Value != nil {
				opt += ":" + *o.Value
			}
			s.options = setOption(s.options, o.Name, opt)
		}
	}
	var b strings.Builder
	for _, ns := range s.nameservers {
		fmt.Fprintf(&b, "nameserver %s\n", ns)
	}
	if len(s.searches) > 0 {
		fmt.Fprintf(&b, "search %s\n", strings.Join(s.searches, " "))
	}
	if len(s.options) > 0 {
		fmt.Fprintf(&b, "options %s\n", strings.Join(s.options, " "))
	}
	return b.String()
}

// appendMissing appends the values not yet in list.
func appendMissing(list []string, values ...string) []string {
	for _, v := range values {
		found := false
		for _, have := range list {
			found = found || have == v
		}
		if !found {
			list = append(list, v)
		}
	}
	return list
}

// setOption replaces the option called name (with or without a value) by opt,
// or appends opt.
func setOption(options []string, name, opt string) []string {
	for i, have := range options {
		if n, _, _ := strings.Cut(have, ":"); n == name {
			options[i] = opt
			return options
		}
	}
	return append(options, opt)
}

// hostsFile renders the pod's /etc/hosts: loopback names, the pod's own name
// at podIP (with its FQDN when spec.subdomain is set) and spec.hostAliases.
// Host network pods see the host's file (hostHosts) plus their aliases.
func hostsFile(pod *corev1.Pod, podIP, clusterDomain string, hostHosts []byte) string {
	var b strings.Builder
	if pod.Spec.HostNetwork {
		b.Write(hostHosts)
		if len(hostHosts) > 0 && hostHosts[len(hostHosts)-1] != '\n' {
			b.WriteByte('\n')
		}
	} else {
		b.WriteString("# Kubernetes-managed hosts file (hitless node agent).\n")
		b.WriteString("127.0.0.1\tlocalhost\n")
		b.WriteString("::1\tlocalhost ip6-localhost ip6-loopback\n")
		b.WriteString("fe00::0\tip6-localnet\n")
		b.WriteString("fe00::0\tip6-mcastprefix\n")
		b.WriteString("fe00::1\tip6-allnodes\n")
		b.WriteString("fe00::2\tip6-allrouters\n")
		host := podHostname(pod)
		if pod.Spec.Subdomain != "" {
			fqdn := fmt.Sprintf("%s.%s.%s.svc.%s", host, pod.Spec.Subdomain, pod.Namespace, clusterDomain)
			fmt.Fprintf(&b, "%s\t%s\t%s\n", podIP, fqdn, host)
		} else {
			fmt.Fprintf(&b, "%s\t%s\n", podIP, host)
		}
	}
	if len(pod.Spec.HostAliases) > 0 {
		b.WriteString("\n# Entries added by HostAliases.\n")
		for _, a := range pod.Spec.HostAliases {
			fmt.Fprintf(&b, "%s\t%s\n", a.IP, strings.Join(a.Hostnames, "\t"))
		}
	}
	return b.String()
}
