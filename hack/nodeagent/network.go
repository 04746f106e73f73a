package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/vishvananda/netns"
)

// netnsDir is where named network namespaces are bind-mounted (as by ip netns).
const netnsDir = "/run/netns"

// netnsName is the deterministic, unique network namespace name of a pod.
func netnsName(uid string) string { return "hitless-" + uid }

// netnsPath is the bind mount of a named network namespace.
func netnsPath(name string) string { return filepath.Join(netnsDir, name) }

// network attaches pod network namespaces with a CNI network list.
type network struct {
	cni  *libcni.CNIConfig
	conf *libcni.NetworkConfigList
}

// newNetwork loads the .conflist and finds the plugins in binDir.
func newNetwork(confFile, binDir, cacheDir string) (*network, error) {
	conf, err := libcni.ConfListFromFile(confFile)
	if err != nil {
		return nil, fmt.Errorf("failed to load CNI config %s: %w", confFile, err)
	}
	// An explicit exec: libcni would otherwise create one lazily on every
	// call, racing between concurrent pod setups.
	exec := &invoke.DefaultExec{RawExec: &invoke.RawExec{Stderr: os.Stderr}, PluginDecoder: version.PluginDecoder{}}
	return &network{cni: libcni.NewCNIConfigWithCacheDir([]string{binDir}, cacheDir, exec), conf: conf}, nil
}

// runtimeConf is the CNI runtime configuration of a pod's eth0.
func runtimeConf(nsName, namespace, name, uid string) *libcni.RuntimeConf {
	return &libcni.RuntimeConf{
		ContainerID: nsName,
		NetNS:       netnsPath(nsName),
		IfName:      "eth0",
		Args: [][2]string{
			{"IgnoreUnknown", "1"},
			{"K8S_POD_NAMESPACE", namespace},
			{"K8S_POD_NAME", name},
			{"K8S_POD_INFRA_CONTAINER_ID", nsName},
			{"K8S_POD_UID", uid},
		},
	}
}

// add creates the named network namespace and runs CNI ADD in it, returning
// the pod's IPv4 address.
func (n *network) add(ctx context.Context, nsName, namespace, name, uid string) (string, error) {
	if err := createNetns(nsName); err != nil {
		return "", err
	}
	res, err := n.cni.AddNetworkList(ctx, n.conf, runtimeConf(nsName, namespace, name, uid))
	if err != nil {
		return "", fmt.Errorf("CNI ADD %s: %w", nsName, err)
	}
	r, err := types100.NewResultFromResult(res)
	if err != nil {
		return "", fmt.Errorf("CNI result of %s: %w", nsName, err)
	}
	for _, ip := range r.IPs {
		if ip.Address.IP.To4() != nil {
			return ip.Address.IP.String(), nil
		}
	}
	return "", fmt.Errorf("CNI ADD %s returned no IPv4 address", nsName)
}

// del runs CNI DEL (releasing the address) and removes the namespace. It is
// safe to call for a namespace that is already gone.
func (n *network) del(ctx context.Context, nsName, namespace, name, uid string) error {
	var errs []error
	rc := runtimeConf(nsName, namespace, name, uid)
	if _, err := os.Stat(rc.NetNS); err != nil {
		rc.NetNS = "" // plugins still release IPAM state without a namespace
	}
	if err := n.cni.DelNetworkList(ctx, n.conf, rc); err != nil {
		errs = append(errs, fmt.Errorf("CNI DEL %s: %w", nsName, err))
	}
	if err := deleteNetns(nsName); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// createNetns creates a named network namespace without moving the calling
// goroutine's thread for good: netns.NewNamed switches the thread into the new
// namespace, so the thread is locked and switched back.
func createNetns(name string) error {
	if _, err := os.Stat(netnsPath(name)); err == nil {
		return nil // left from an interrupted attempt: reuse it
	}
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("failed to get current netns: %w", err)
	}
	defer orig.Close()
	ns, err := netns.NewNamed(name)
	if err != nil {
		if serr := netns.Set(orig); serr == nil {
			runtime.UnlockOSThread()
		}
		return fmt.Errorf("failed to create netns %s: %w", name, err)
	}
	ns.Close()
	if err := netns.Set(orig); err != nil {
		// Leave the thread locked: it is discarded when the goroutine exits.
		return fmt.Errorf("failed to return to the host netns: %w", err)
	}
	runtime.UnlockOSThread()
	return nil
}

// deleteNetns unmounts and removes a named network namespace.
func deleteNetns(name string) error {
	err := netns.DeleteNamed(name)
	if err == nil || errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOENT) {
		os.Remove(netnsPath(name))
		return nil
	}
	return fmt.Errorf("failed to delete netns %s: %w", name, err)
}

// pidsInNetns lists the processes whose network namespace is the named one.
func pidsInNetns(name string) []int {
	var target syscall.Stat_t
	if err := syscall.Stat(netnsPath(name), &target); err != nil {
		return nil
	}
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		var st syscall.Stat_t
		if err := syscall.Stat(fmt.Sprintf("/proc/%d/ns/net", pid), &st); err != nil {
			continue
		}
		if st.Ino == target.Ino && st.Dev == target.Dev {
			pids = append(pids, pid)
		}
	}
	return pids
}
