package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/virtual-kubelet/virtual-kubelet/errdefs"
	"github.com/virtual-kubelet/virtual-kubelet/node/api"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	corev1listers "k8s.io/client-go/listers/core/v1"
)

// serveKubeletAPI serves the kubelet endpoints the API server proxies to
// (container logs, exec) over TLS with a self-signed certificate on the node
// address. It retries binding until the address exists (the CNI bridge may be
// created by the first pod) and stops with ctx.
func (a *agent) serveKubeletAPI(ctx context.Context, pods corev1listers.PodLister) {
	cert, err := selfSignedCert(a.cfg.nodeName, a.cfg.nodeIP)
	if err != nil {
		slog.Error("kubelet API disabled", "err", err)
		return
	}
	handler := api.PodHandler(api.PodHandlerConfig{
		GetContainerLogs: a.containerLogs,
		RunInContainer:   a.runInContainer,
		GetPods:          a.GetPods,
		GetPodsFromKubernetes: func(context.Context) ([]*corev1.Pod, error) {
			return pods.List(labels.Everything())
		},
		StreamIdleTimeout:     30 * time.Minute,
		StreamCreationTimeout: 30 * time.Second,
	}, false)
	srv := &http.Server{
		Handler:   handler,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
	}
	addr := net.JoinHostPort(a.cfg.nodeIP, strconv.Itoa(a.cfg.kubeletPort))
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	for ctx.Err() == nil {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			select {
			case <-time.After(time.Second):
			case <-ctx.Done():
			}
			continue
		}
		slog.Info("kubelet API listening", "addr", addr)
		if err := srv.ServeTLS(ln, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			slog.Warn("kubelet API stopped", "err", err)
		}
		return
	}
}

func selfSignedCert(name, ip string) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{name},
		IPAddresses:  []net.IP{net.ParseIP(ip)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

// containerLogs serves a container's log file; tailLines, limitBytes and
// follow are honoured, timestamps and since* are not (the file has none).
func (a *agent) containerLogs(ctx context.Context, namespace, name, container string, opts api.ContainerLogOpts) (io.ReadCloser, error) {
	pod := &corev1.Pod{}
	pod.Namespace, pod.Name = namespace, name
	f, err := os.Open(a.logPath(pod, container))
	if err != nil {
		return nil, errdefs.NotFoundf("no log for container %s of pod %s/%s", container, namespace, name)
	}
	if opts.Tail > 0 {
		if _, err := f.Seek(tailOffset(f, opts.Tail), io.SeekStart); err != nil {
			f.Close()
			return nil, err
		}
	}
	var r io.Reader = f
	if opts.Follow {
		r = &followReader{ctx: ctx, f: f}
	}
	if opts.LimitBytes > 0 {
		r = io.LimitReader(r, int64(opts.LimitBytes))
	}
	return struct {
		io.Reader
		io.Closer
	}{r, f}, nil
}

// tailOffset is the offset of the last n lines of f.
func tailOffset(f *os.File, n int) int64 {
	end, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return 0
	}
	const chunk = 8192
	pos, lines := end, 0
	buf := make([]byte, chunk)
	for pos > 0 {
		size := min(int64(chunk), pos)
		pos -= size
		if _, err := f.ReadAt(buf[:size], pos); err != nil && err != io.EOF {
			return 0
		}
		for i := size - 1; i >= 0; i-- {
			if buf[i] == '\n' && pos+i != end-1 {
				lines++
				if lines == n {
					return pos + i + 1
				}
			}
		}
	}
	return 0
}

// followReader keeps reading a growing file until ctx ends.
type followReader struct {
	ctx context.Context
	f   *os.File
}

func (r *followReader) Read(p []byte) (int, error) {
	for {
		n, err := r.f.Read(p)
		if n > 0 || (err != nil && err != io.EOF) {
			return n, err
		}
		select {
		case <-r.ctx.Done():
			return 0, io.EOF
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// runInContainer serves kubectl exec (without a TTY).
func (a *agent) runInContainer(ctx context.Context, namespace, name, container string, cmd []string, attach api.AttachIO) error {
	r := a.runner(namespace, name)
	if r == nil {
		return errdefs.NotFoundf("pod %s/%s is not running here", namespace, name)
	}
	var c *ctr
	for _, x := range append(append([]*ctr{}, r.ctrs...), r.init...) {
		if x.spec.Name == container {
			c = x
		}
	}
	if c == nil {
		return errdefs.NotFoundf("container %s not found in pod %s/%s", container, namespace, name)
	}
	ec, err := r.execCommand(ctx, c, cmd)
	if err != nil {
		return err
	}
	if in := attach.Stdin(); in != nil {
		ec.Stdin = in
	}
	var stderr bytes.Buffer
	ec.Stdout, ec.Stderr = attach.Stdout(), io.MultiWriter(attach.Stderr(), &stderr)
	if attach.Stderr() == nil {
		ec.Stderr = &stderr
	}
	if err := ec.Run(); err != nil {
		return fmt.Errorf("command terminated: %w", err)
	}
	return nil
}
