// Package vcenter holds what admission and the controller must agree on about a vCenter
// server string, so that a claim made on "https://VC01.example:443/sdk/" and one made on
// "vc01.example" are recognised as the same server.
package vcenter

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"unicode"

	"k8s.io/apimachinery/pkg/util/validation"
)

// DefaultPort is the port vCenter's SDK listens on unless the server string says
// otherwise; it is dropped from the normalized form.
const DefaultPort = 443

// NormalizeServer turns a vcenter.server value into its canonical form: the lower-case
// host name without a trailing dot (or the IP address, IPv6 in brackets), followed by
// ":port" only when the port is not 443. The SDK URL is "https://" + result + "/sdk".
//
// Accepted: "vc01.example", "VC01.example.", "vc01.example:8443",
// "https://vc01.example", "https://vc01.example:443/sdk/", "10.0.0.5", "[fd00::5]:443".
// Refused, each with an error that says what to write instead: whitespace, a scheme
// other than https, user info (a password in a spec that everyone who can read pools can
// see), a path other than /sdk (the vSphere Client's /ui in particular), a query or
// fragment, a port outside 1-65535, and a host that is neither a DNS name nor an IP.
//
// The error never repeats a password: callers may put it into messages as it is.
func NormalizeServer(s string) (string, error) {
	if s == "" {
		return "", errors.New("is empty; write the vCenter host name, such as vcenter.example.com")
	}
	if i := strings.IndexFunc(s, unicode.IsSpace); i >= 0 {
		return "", errors.New("contains whitespace; write the host name alone, such as vcenter.example.com")
	}
	raw := s
	if i := strings.Index(raw, "://"); i >= 0 {
		scheme := strings.ToLower(raw[:i])
		if scheme != "https" {
			return "", fmt.Errorf("uses the scheme %q; vCenter is reached over https only: write https://%s or just the host name", scheme, redactedRest(raw[i+3:]))
		}
		raw = "https://" + raw[i+3:]
	} else {
		raw = "https://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil {
		if strings.Contains(raw, "@") {
			return "", errors.New("carries user info; put the username and password into the Secret of credentialsSecretRef and write the host name alone")
		}
		return "", errors.New("is not a host name, host:port or https URL; write it as vcenter.example.com, vcenter.example.com:8443 or https://vcenter.example.com/sdk (IPv6 in brackets: [fd00::5])")
	}
	if u.User != nil {
		return "", errors.New("carries user info (user:password@); a password here is readable by everyone who can read pools: put the username and password into the Secret of credentialsSecretRef and write the host name alone")
	}
	if u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || strings.Contains(raw, "#") {
		return "", errors.New("has a query or fragment; write the host name alone, such as vcenter.example.com")
	}
	switch p := strings.ToLower(u.Path); {
	case p == "" || p == "/" || p == "/sdk" || p == "/sdk/":
	case p == "/ui" || strings.HasPrefix(p, "/ui/"):
		return "", errors.New("is the vSphere Client's browser URL (/ui); write the host name alone, such as vcenter.example.com (gpupool talks to the SDK at /sdk)")
	default:
		return "", fmt.Errorf("has the path %q; the only path vCenter's SDK is served at is /sdk: write the host name alone, such as vcenter.example.com", cut(u.Path))
	}
	host := u.Hostname()
	port := DefaultPort
	if ps := u.Port(); ps != "" || strings.HasSuffix(u.Host, ":") {
		n, err := strconv.Atoi(ps)
		if err != nil || n < 1 || n > 65535 {
			return "", fmt.Errorf("has the port %q; a port is a number from 1 to 65535, and vCenter's default 443 can be left out", ps)
		}
		port = n
	}
	host, err = normalizeHost(host)
	if err != nil {
		return "", err
	}
	if port == DefaultPort {
		return host, nil
	}
	return net.JoinHostPort(strings.Trim(host, "[]"), strconv.Itoa(port)), nil
}

// normalizeHost lower-cases a DNS name and drops its trailing dot (the root label, which
// names the same host), or puts an IP address into its canonical form.
func normalizeHost(host string) (string, error) {
	if host == "" {
		return "", errors.New("has no host name; write it as vcenter.example.com")
	}
	if ip := net.ParseIP(host); ip != nil {
		if ip.To4() != nil {
			return ip.String(), nil
		}
		return "[" + ip.String() + "]", nil
	}
	if strings.Contains(host, "%") {
		return "", errors.New("has an IPv6 zone; write a routable address or a host name")
	}
	h := strings.TrimSuffix(strings.ToLower(host), ".")
	msgs := validation.IsDNS1123Subdomain(h)
	if len(msgs) == 0 {
		// A DNS subdomain allows labels longer than DNS does.
		for _, label := range strings.Split(h, ".") {
			if len(label) > validation.DNS1123LabelMaxLength {
				msgs = append(msgs, fmt.Sprintf("a label may be at most %d characters", validation.DNS1123LabelMaxLength))
				break
			}
		}
	}
	if len(msgs) > 0 {
		return "", fmt.Errorf("has the host %q, which is not a DNS name or IP address (%s); write it as vcenter.example.com", cut(host), strings.Join(msgs, "; "))
	}
	return h, nil
}

// SameServer tells whether two server strings name the same vCenter. Strings that do not
// normalize are compared as written, so that two equally broken specs still collide.
func SameServer(a, b string) bool {
	na, errA := NormalizeServer(a)
	nb, errB := NormalizeServer(b)
	if errA != nil || errB != nil {
		return strings.EqualFold(strings.TrimSpace(a), strings.TrimSpace(b))
	}
	return na == nb
}

// redactedRest is the part of a URL after the scheme with any user info dropped, for
// messages.
func redactedRest(rest string) string {
	if i := strings.LastIndex(rest, "@"); i >= 0 {
		rest = rest[i+1:]
	}
	return cut(rest)
}

func cut(s string) string {
	const limit = 64
	if len(s) <= limit {
		return s
	}
	return s[:limit] + "..."
}
