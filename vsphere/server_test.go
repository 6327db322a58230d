package vsphere

import "testing"

func TestCanonicalServer(t *testing.T) {
	same := []string{
		"vc01.example",
		"vc01.example.",
		"VC01.Example",
		"https://vc01.example/sdk/",
		"https://vc01.example/sdk",
		"https://vc01.example/",
		"https://vc01.example:443/sdk",
		"vc01.example:443",
		" vc01.example ",
		"https://user@vc01.example/sdk",
	}
	for _, s := range same {
		if got := CanonicalServer(s); got != "vc01.example:443" {
			t.Errorf("CanonicalServer(%q) = %q, want vc01.example:443", s, got)
		}
	}
	for s, want := range map[string]string{
		"vc01.example:8443":         "vc01.example:8443",
		"https://[fe80::1]:443/sdk": "[fe80::1]:443",
		"127.0.0.1:40123":           "127.0.0.1:40123",
		"":                          "",
	} {
		if got := CanonicalServer(s); got != want {
			t.Errorf("CanonicalServer(%q) = %q, want %q", s, got, want)
		}
	}
	if CanonicalServer("vc01.example:8443") == CanonicalServer("vc01.example") {
		t.Error("another port must be another server")
	}
}
