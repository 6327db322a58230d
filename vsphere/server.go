package vsphere

import (
	"net"
	"net/url"
	"strings"

	"github.com/gpupool/gpupool/internal/vcenter"
)

// CanonicalServer names a vCenter the same way however a pool spells it, so that claims
// and caches keyed by server agree: "https://VC01.example:443/sdk/", "vc01.example." and
// "vc01.example" are all "vc01.example:443". It lowercases the host, drops the scheme,
// user info, a trailing dot, the /sdk path and trailing slashes, and makes the port
// explicit (443 unless given). It does not validate: a string it cannot parse comes back
// lowercased and trimmed, so that it still compares equal to the same spelling.
//
// A server that admission accepts is given vcenter.NormalizeServer's canonical form
// (with the port made explicit), so that the webhook, the claim guard and the session
// cache compare servers one way; anything else falls back to a lenient parse.
func CanonicalServer(s string) string {
	if n, err := vcenter.NormalizeServer(s); err == nil {
		if _, _, err := net.SplitHostPort(n); err != nil {
			n = net.JoinHostPort(strings.Trim(n, "[]"), "443")
		}
		return n
	}
	raw := strings.ToLower(strings.TrimSpace(s))
	if raw == "" {
		return ""
	}
	if !strings.Contains(raw, "://") {
		raw = "https://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return strings.TrimSuffix(strings.ToLower(strings.TrimSpace(s)), "/")
	}
	host, port := u.Hostname(), u.Port()
	host = strings.TrimSuffix(host, ".")
	if port == "" {
		port = "443"
	}
	return net.JoinHostPort(host, port)
}
