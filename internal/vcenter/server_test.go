package vcenter

import (
	"strings"
	"testing"
)

func TestNormalizeServer(t *testing.T) {
	same := map[string]string{
		"vc01.example":                  "vc01.example",
		"vc01.example.":                 "vc01.example",
		"VC01.Example":                  "vc01.example",
		"https://VC01.example:443/sdk/": "vc01.example",
		"HTTPS://vc01.example/sdk":      "vc01.example",
		"https://vc01.example/":         "vc01.example",
		"vc01.example:443":              "vc01.example",
		"vc01.example:8443":             "vc01.example:8443",
		"https://vc01.example:8443/sdk": "vc01.example:8443",
		"10.0.0.5":                      "10.0.0.5",
		"10.0.0.5:443":                  "10.0.0.5",
		"[FD00::5]":                     "[fd00::5]",
		"[fd00::5]:8443":                "[fd00::5]:8443",
		"https://[fd00:0::5]:443/sdk":   "[fd00::5]",
	}
	for in, want := range same {
		got, err := NormalizeServer(in)
		if err != nil || got != want {
			t.Errorf("NormalizeServer(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	bad := map[string]string{
		"":                                "empty",
		"http://vc01.example":             "https only",
		"ftp://vc01.example":              "https only",
		"https://admin:hunter2@vc01":      "user info",
		"admin:hunter2@vc01.example":      "user info",
		"https://vc01.example/ui":         "browser URL",
		"https://vc01.example/ui/#/host":  "",
		"https://vc01.example/api":        "path",
		"https://vc01.example/sdk?x=1":    "query",
		"vc01.example:0":                  "port",
		"vc01.example:65536":              "port",
		"vc01.example:":                   "port",
		"vc01.example:https":              "",
		" vc01.example":                   "whitespace",
		"vc01.example\n":                  "whitespace",
		"vc 01.example":                   "whitespace",
		"vc_01.example":                   "not a DNS name",
		"https://":                        "no host",
		"fd00::5":                         "",
		"-vc.example":                     "not a DNS name",
		strings.Repeat("a", 64) + ".test": "not a DNS name",
	}
	for in, want := range bad {
		got, err := NormalizeServer(in)
		if err == nil {
			t.Errorf("NormalizeServer(%q) = %q, want an error", in, got)
			continue
		}
		if !strings.Contains(err.Error(), want) {
			t.Errorf("NormalizeServer(%q): %v; want it to mention %q", in, err, want)
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("NormalizeServer(%q) leaks the password: %v", in, err)
		}
	}
}

func TestSameServer(t *testing.T) {
	if !SameServer("https://VC01.example:443/sdk/", "vc01.example.") || !SameServer("vc01.example.", "vc01.example") {
		t.Error("spellings of one server differ")
	}
	if SameServer("vc01.example", "vc01.example:8443") || SameServer("vc01.example", "vc02.example") {
		t.Error("different servers compare equal")
	}
}
