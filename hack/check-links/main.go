// Command check-links fails when a relative link in README.md, CHANGELOG.md or docs/*.md
// does not resolve: to a file that does not exist, or to a #heading that file does not
// have. Links inside fenced code blocks and absolute URLs are not checked.
//
//	go run ./hack/check-links
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

var (
	fence   = regexp.MustCompile("(?s)```.*?```")
	link    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	scheme  = regexp.MustCompile(`^[a-z]+:`)
	heading = regexp.MustCompile(`(?m)^#+\s+(.*)$`)
	notSlug = regexp.MustCompile(`[^\p{L}\p{N}_\- ]`)
)

func main() {
	docs, _ := filepath.Glob("docs/*.md")
	bad := 0
	for _, f := range append([]string{"README.md", "CHANGELOG.md"}, docs...) {
		for _, problem := range check(f) {
			fmt.Println(problem)
			bad++
		}
	}
	if bad > 0 {
		fmt.Printf("%d broken links\n", bad)
		os.Exit(1)
	}
}

// check lists the broken links of one Markdown file.
func check(file string) []string {
	raw, err := os.ReadFile(file)
	if err != nil {
		return []string{err.Error()}
	}
	var out []string
	for _, m := range link.FindAllStringSubmatch(fence.ReplaceAllString(string(raw), ""), -1) {
		target := m[1]
		if scheme.MatchString(target) {
			continue
		}
		path, anchor, _ := strings.Cut(target, "#")
		resolved := file
		if path != "" {
			resolved = filepath.Join(filepath.Dir(file), path)
		}
		if _, err := os.Stat(resolved); err != nil {
			out = append(out, fmt.Sprintf("%s: %s: no such file", file, target))
			continue
		}
		if anchor != "" && strings.HasSuffix(resolved, ".md") && !hasHeading(resolved, anchor) {
			out = append(out, fmt.Sprintf("%s: %s: no such heading", file, target))
		}
	}
	return out
}

// hasHeading tells whether a Markdown file has a heading whose GitHub anchor is anchor.
func hasHeading(file, anchor string) bool {
	raw, err := os.ReadFile(file)
	if err != nil {
		return false
	}
	for _, m := range heading.FindAllStringSubmatch(string(raw), -1) {
		h := strings.ToLower(strings.TrimSpace(strings.ReplaceAll(m[1], "`", "")))
		if strings.ReplaceAll(notSlug.ReplaceAllString(h, ""), " ", "-") == anchor {
			return true
		}
	}
	return false
}
