package proxyproto

import (
	"bufio"
	"context"
	"net"
	"strings"
	"testing"
	"time"
)

func TestHeader(t *testing.T) {
	tcp := func(ip string, port int) net.Addr { return &net.TCPAddr{IP: net.ParseIP(ip), Port: port} }
	for _, tc := range []struct {
		name     string
		src, dst net.Addr
		want     string
	}{
		{"IPv4", tcp("10.244.0.1", 51234), tcp("10.244.0.17", 8080),
			"PROXY TCP4 10.244.0.1 10.244.0.17 51234 8080\r\n"},
		{"IPv4 held in 16 bytes, as net.ParseIP returns it, is still TCP4", &net.TCPAddr{IP: net.ParseIP("192.0.2.1").To16(), Port: 1}, tcp("192.0.2.2", 443),
			"PROXY TCP4 192.0.2.1 192.0.2.2 1 443\r\n"},
		{"IPv6", tcp("2001:db8::1", 40000), tcp("fd00:10:244::17", 8443),
			"PROXY TCP6 2001:db8::1 fd00:10:244::17 40000 8443\r\n"},
		{"IPv6 loopback", tcp("::1", 65535), tcp("::1", 80),
			"PROXY TCP6 ::1 ::1 65535 80\r\n"},
		{"mixed families are TCP6, the IPv4 side IPv4-mapped", tcp("192.0.2.1", 5), tcp("2001:db8::2", 6),
			"PROXY TCP6 ::ffff:192.0.2.1 2001:db8::2 5 6\r\n"},
		{"an address that is not TCP is UNKNOWN", &net.UnixAddr{Name: "@x", Net: "unix"}, tcp("192.0.2.2", 80),
			"PROXY UNKNOWN\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := string(Header(tc.src, tc.dst)); got != tc.want {
				t.Errorf("Header() = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestDialSendsTheHeaderFirst: the listener reads the line before anything
// else, and it names the connection as the listener sees it.
func TestDialSendsTheHeaderFirst(t *testing.T) {
	for _, network := range []string{"tcp4", "tcp6"} {
		t.Run(network, func(t *testing.T) {
			host, prefix := "127.0.0.1", "PROXY TCP4 127.0.0.1 127.0.0.1 "
			if network == "tcp6" {
				host, prefix = "::1", "PROXY TCP6 ::1 ::1 "
			}
			l, err := net.Listen(network, net.JoinHostPort(host, "0"))
			if err != nil {
				t.Skipf("cannot listen on %s: %v", host, err)
			}
			defer l.Close()
			got := make(chan string, 1)
			want := make(chan string, 1)
			go func() {
				c, err := l.Accept()
				if err != nil {
					got <- err.Error()
					return
				}
				defer c.Close()
				want <- string(Header(c.RemoteAddr(), c.LocalAddr()))
				line, err := bufio.NewReader(c).ReadString('\n')
				if err != nil {
					line = err.Error()
				}
				got <- line
			}()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			c, err := Dial(ctx, &net.Dialer{}, "tcp", l.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if g, w := <-got, <-want; g != w || !strings.HasPrefix(g, prefix) {
				t.Errorf("the listener read %q, want %q", g, w)
			}
		})
	}
}
