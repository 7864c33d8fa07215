package tlsfiles

import (
	"net"
	"net/url"
	"strings"
)

// Loopback reports whether addr, a listen address ("127.0.0.1:9090") or a
// gRPC target ("dns:///decider:9090", "unix:///run/decider.sock"), stays on
// this machine: a loopback IP, "localhost" or a Unix socket. Anything else,
// an empty host (":9090" listens on every interface) included, does not.
func Loopback(addr string) bool {
	endpoint := addr
	if strings.Contains(addr, "://") || strings.HasPrefix(addr, "unix:") {
		u, err := url.Parse(addr)
		if err != nil {
			return false
		}
		switch u.Scheme {
		case "unix", "unix-abstract":
			return true
		}
		endpoint = strings.TrimPrefix(u.Path, "/")
		if endpoint == "" {
			endpoint = u.Opaque
		}
	}
	host, _, err := net.SplitHostPort(endpoint)
	if err != nil {
		host = endpoint
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
