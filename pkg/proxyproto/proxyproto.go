// Package proxyproto writes the header of the PROXY protocol, version 1
// (HAProxy's text form): one line that a load balancer such as an AWS NLB
// puts before the bytes of each connection it forwards, naming the client.
// A Contour run with --use-proxy-protocol makes every Envoy listener expect
// it, so whoever connects to an Envoy pod directly (the prober, tests) must
// send it first, before any HTTP request or TLS handshake.
package proxyproto

import (
	"context"
	"fmt"
	"net"
	"time"
)

// Header is the version 1 header of a connection from src to dst:
// "PROXY TCP4 <src ip> <dst ip> <src port> <dst port>\r\n" when both are
// IPv4, TCP6 with IPv6 addresses otherwise (an IPv4 one written as
// IPv4-mapped, the protocol's rule for mixed families), and
// "PROXY UNKNOWN\r\n" when either is not a TCP address.
func Header(src, dst net.Addr) []byte {
	s, ok1 := src.(*net.TCPAddr)
	d, ok2 := dst.(*net.TCPAddr)
	if !ok1 || !ok2 || s.IP == nil || d.IP == nil {
		return []byte("PROXY UNKNOWN\r\n")
	}
	if s4, d4 := s.IP.To4(), d.IP.To4(); s4 != nil && d4 != nil {
		return fmt.Appendf(nil, "PROXY TCP4 %s %s %d %d\r\n", s4, d4, s.Port, d.Port)
	}
	return fmt.Appendf(nil, "PROXY TCP6 %s %s %d %d\r\n", ipv6(s.IP), ipv6(d.IP), s.Port, d.Port)
}

// ipv6 writes ip in IPv6 form: Go writes an IPv4-mapped address as IPv4.
func ipv6(ip net.IP) string {
	if v4 := ip.To4(); v4 != nil {
		return "::ffff:" + v4.String()
	}
	return ip.String()
}

// Dial connects to addr with d and sends the header of the new connection
// (its own local and remote addresses) before anything else.
func Dial(ctx context.Context, d *net.Dialer, network, addr string) (net.Conn, error) {
	conn, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	if deadline, ok := ctx.Deadline(); ok {
		_ = conn.SetWriteDeadline(deadline)
	}
	if _, err := conn.Write(Header(conn.LocalAddr(), conn.RemoteAddr())); err != nil {
		conn.Close()
		return nil, fmt.Errorf("failed to send the PROXY protocol header to %s: %w", addr, err)
	}
	_ = conn.SetWriteDeadline(time.Time{})
	return conn, nil
}
