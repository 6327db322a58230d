// Package monitoring tests what config/prometheus ships: the alert rules, evaluated by
// promtool on synthetic series (rules_test.yaml), and the names of the metrics the
// alerts and the Grafana dashboard query, checked against what the manager registers.
//
// Prometheus's own PromQL parser would bring the whole of Prometheus into gpupool's
// go.mod, so MetricNames is a small lexer that finds the metric names of an expression
// and nothing else: enough for the queries we write, and strict (an error, not a guess)
// where it cannot tell.
package monitoring

import (
	"fmt"
	"strings"
)

// keywords are the words of PromQL that stand where a metric name could: binary
// operators, modifiers, the special numbers and the aggregations (sum by (pool) (x): the
// aggregation is followed by by, not '('). Functions need no list: a name followed by
// '(' is never a metric.
var keywords = map[string]bool{
	"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true,
	"stdvar": true, "count": true, "count_values": true, "bottomk": true, "topk": true,
	"quantile": true, "limitk": true, "limit_ratio": true,
	"and": true, "or": true, "unless": true, "atan2": true, "bool": true, "offset": true,
	"inf": true, "nan": true,
	// Prometheus 3's experimental range modifiers: rate(x[5m] anchored).
	"anchored": true, "smoothed": true,
}

// labelLists are the words followed by a parenthesised list of label names.
var labelLists = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true,
	"group_left": true, "group_right": true,
}

// MetricNames returns the metric names a PromQL expression selects, each once, in the
// order they first appear. Grafana's variables ($pool, ${pool}, [[pool]],
// $__rate_interval) may stand where PromQL allows a value or a duration. An expression
// whose metric names cannot be told (a regular expression on __name__, unbalanced
// brackets, an unterminated string) is an error.
func MetricNames(expr string) ([]string, error) {
	l := lexer{src: expr}
	var names []string
	seen := map[string]bool{}
	add := func(n string) {
		if !seen[n] {
			seen[n] = true
			names = append(names, n)
		}
	}
	for {
		tok, err := l.next()
		if err != nil {
			return nil, err
		}
		switch tok.kind {
		case tokEOF:
			if l.depth != 0 {
				return nil, fmt.Errorf("%q: unbalanced parentheses", expr)
			}
			return names, nil
		case tokIdent:
			word := strings.ToLower(tok.text)
			next := l.peekByte()
			switch {
			case labelLists[word]:
				if next == '(' {
					if err := l.skipLabelList(); err != nil {
						return nil, err
					}
				}
			case next == '(':
				// A function or an aggregation (sum, rate, histogram_quantile...).
			case keywords[word]:
			default:
				add(tok.text)
			}
		case tokSelector:
			n, err := selectorName(tok.text)
			if err != nil {
				return nil, fmt.Errorf("%q: %w", expr, err)
			}
			if n != "" {
				add(n)
			}
		}
	}
}

type tokKind int

const (
	tokEOF tokKind = iota
	tokIdent
	// tokSelector is the inside of {...}, the label matchers of a selector.
	tokSelector
	tokOther
)

type token struct {
	kind tokKind
	text string
}

type lexer struct {
	src   string
	pos   int
	depth int // open parentheses
}

func isIdentStart(c byte) bool {
	return c == '_' || c == ':' || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z')
}

func isIdentByte(c byte) bool { return isIdentStart(c) || ('0' <= c && c <= '9') }

func (l *lexer) skipSpace() {
	for l.pos < len(l.src) {
		switch l.src[l.pos] {
		case ' ', '\t', '\n', '\r':
			l.pos++
		case '#': // a comment, to the end of the line
			for l.pos < len(l.src) && l.src[l.pos] != '\n' {
				l.pos++
			}
		default:
			return
		}
	}
}

// peekByte is the next byte after spaces, or 0 at the end.
func (l *lexer) peekByte() byte {
	l.skipSpace()
	if l.pos < len(l.src) {
		return l.src[l.pos]
	}
	return 0
}

func (l *lexer) next() (token, error) {
	l.skipSpace()
	if l.pos >= len(l.src) {
		return token{kind: tokEOF}, nil
	}
	start := l.pos
	c := l.src[l.pos]
	switch {
	case c == '"' || c == '\'' || c == '`':
		if err := l.skipString(); err != nil {
			return token{}, err
		}
	case c == '$':
		l.skipVariable()
	case c == '[':
		// A range, a subquery's range and step, or Grafana's old [[variable]]: durations
		// and variables only.
		end := strings.IndexByte(l.src[l.pos:], ']')
		if end < 0 {
			return token{}, fmt.Errorf("%q: '[' at %d is not closed", l.src, start)
		}
		l.pos += end + 1
		if strings.HasPrefix(l.src[start:], "[[") && l.pos < len(l.src) && l.src[l.pos] == ']' {
			l.pos++
		}
	case c == '{':
		end, err := l.closing(l.pos)
		if err != nil {
			return token{}, err
		}
		l.pos = end + 1
		return token{kind: tokSelector, text: l.src[start+1 : end]}, nil
	case c == '(':
		l.depth++
		l.pos++
	case c == ')':
		l.depth--
		if l.depth < 0 {
			return token{}, fmt.Errorf("%q: ')' at %d closes nothing", l.src, start)
		}
		l.pos++
	case c == ']' || c == '}':
		return token{}, fmt.Errorf("%q: %q at %d closes nothing", l.src, c, start)
	case '0' <= c && c <= '9' || c == '.':
		l.skipNumber()
	case isIdentStart(c):
		for l.pos < len(l.src) && isIdentByte(l.src[l.pos]) {
			l.pos++
		}
		return token{kind: tokIdent, text: l.src[start:l.pos]}, nil
	default: // an operator, a comma, '@'
		l.pos++
	}
	return token{kind: tokOther, text: l.src[start:l.pos]}, nil
}

// skipString moves past a quoted string; PromQL's escapes are Go's, and backquoted
// strings have none.
func (l *lexer) skipString() error {
	q := l.src[l.pos]
	start := l.pos
	for l.pos++; l.pos < len(l.src); l.pos++ {
		switch l.src[l.pos] {
		case '\\':
			if q != '`' {
				l.pos++
			}
		case q:
			l.pos++
			return nil
		}
	}
	return fmt.Errorf("%q: the string at %d is not closed", l.src, start)
}

// skipVariable moves past a Grafana variable: $name or ${name...}.
func (l *lexer) skipVariable() {
	l.pos++
	if l.pos < len(l.src) && l.src[l.pos] == '{' {
		if end := strings.IndexByte(l.src[l.pos:], '}'); end >= 0 {
			l.pos += end + 1
			return
		}
	}
	for l.pos < len(l.src) && isIdentByte(l.src[l.pos]) {
		l.pos++
	}
}

// skipNumber moves past a number or a duration: 1, 0.5, 1e-3, 0x1f, 5m, 1h30m.
func (l *lexer) skipNumber() {
	start := l.pos
	for l.pos < len(l.src) {
		c := l.src[l.pos]
		exponentSign := (c == '+' || c == '-') && (l.src[l.pos-1] == 'e' || l.src[l.pos-1] == 'E') &&
			!strings.HasPrefix(strings.ToLower(l.src[start:]), "0x")
		if !isIdentByte(c) && c != '.' && !exponentSign {
			return
		}
		l.pos++
	}
}

// closing returns the index of the '}' that closes the '{' at open, past quoted strings.
func (l *lexer) closing(open int) (int, error) {
	save := l.pos
	defer func() { l.pos = save }()
	for l.pos = open + 1; l.pos < len(l.src); {
		switch l.src[l.pos] {
		case '"', '\'', '`':
			if err := l.skipString(); err != nil {
				return 0, err
			}
		case '}':
			return l.pos, nil
		case '{':
			return 0, fmt.Errorf("%q: '{' at %d inside a selector", l.src, l.pos)
		default:
			l.pos++
		}
	}
	return 0, fmt.Errorf("%q: '{' at %d is not closed", l.src, open)
}

// skipLabelList moves past the '(' label, ... ')' after by, without, on, ignoring,
// group_left or group_right: label names, never metrics.
func (l *lexer) skipLabelList() error {
	start := l.pos
	for l.pos++; l.pos < len(l.src); {
		switch c := l.src[l.pos]; {
		case c == ')':
			l.pos++
			return nil
		case c == '"' || c == '\'' || c == '`':
			if err := l.skipString(); err != nil {
				return err
			}
		case isIdentByte(c) || c == ',' || c == ' ' || c == '\t' || c == '\n' || c == '\r':
			l.pos++
		default:
			return fmt.Errorf("%q: %q at %d in the label list at %d", l.src, c, l.pos, start)
		}
	}
	return fmt.Errorf("%q: the label list at %d is not closed", l.src, start)
}

// selectorName returns the metric name a selector's matchers give: a quoted name standing
// alone (Prometheus 3's {"my.metric", pool="a"}) or __name__="name". It is "" when the
// selector names no metric, and an error when a regular expression or a negation on
// __name__ leaves the names open.
func selectorName(matchers string) (string, error) {
	var name string
	for _, m := range splitMatchers(matchers) {
		m = strings.TrimSpace(m)
		if m == "" {
			continue
		}
		if q := m[0]; q == '"' || q == '\'' || q == '`' {
			if n, ok := unquote(m); ok {
				name = n
				continue
			}
		}
		label, op, value, ok := cutMatcher(m)
		if !ok {
			return "", fmt.Errorf("cannot read the matcher %q", m)
		}
		if label != "__name__" {
			continue
		}
		if op != "=" {
			return "", fmt.Errorf("the matcher %q leaves the metric names open: name the metric", m)
		}
		n, ok := unquote(value)
		if !ok {
			return "", fmt.Errorf("cannot read the value of %q", m)
		}
		name = n
	}
	return name, nil
}

// splitMatchers splits a selector's inside at the commas outside quotes.
func splitMatchers(s string) []string {
	var parts []string
	start := 0
	var quote byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			if c == '\\' && quote != '`' {
				i++
			} else if c == quote {
				quote = 0
			}
		case c == '"' || c == '\'' || c == '`':
			quote = c
		case c == ',':
			parts = append(parts, s[start:i])
			start = i + 1
		}
	}
	return append(parts, s[start:])
}

// cutMatcher splits label op "value"; the label may be quoted.
func cutMatcher(m string) (label, op, value string, ok bool) {
	i := 0
	if q := m[0]; q == '"' || q == '\'' || q == '`' {
		end := strings.IndexByte(m[1:], q)
		if end < 0 {
			return "", "", "", false
		}
		label, _ = unquote(m[:end+2])
		i = end + 2
	} else {
		for i < len(m) && isIdentByte(m[i]) {
			i++
		}
		label = m[:i]
	}
	rest := strings.TrimSpace(m[i:])
	for _, o := range []string{"=~", "!~", "!=", "="} {
		if strings.HasPrefix(rest, o) {
			return label, o, strings.TrimSpace(rest[len(o):]), label != ""
		}
	}
	return "", "", "", false
}

// unquote returns the text of a quoted string that is the whole of s.
func unquote(s string) (string, bool) {
	if len(s) < 2 || s[0] != s[len(s)-1] || strings.IndexByte(`"'`+"`", s[0]) < 0 {
		return "", false
	}
	inner := s[1 : len(s)-1]
	if s[0] != '`' {
		var b strings.Builder
		for i := 0; i < len(inner); i++ {
			if inner[i] == '\\' && i+1 < len(inner) {
				i++
			} else if inner[i] == s[0] {
				return "", false
			}
			b.WriteByte(inner[i])
		}
		return b.String(), true
	}
	if strings.IndexByte(inner, '`') >= 0 {
		return "", false
	}
	return inner, true
}
