// Package redact shows a PostgreSQL connection string, and errors about
// one, without its passwords: the one place the lab hides them. A string
// whose parts cannot be told apart for certain (one that does not parse,
// or that Go's URL parser and pgx's would read differently) is not shown
// at all: any part of it may be a password.
package redact

import (
	"errors"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Mask is what a password is replaced with.
const Mask = "xxxxx"

// Texts shown in place of a connection string that does not parse.
const (
	hiddenURL     = "(a URL that does not parse, not shown: it may hold a password)"
	hiddenKeyword = "(a connection string that does not parse, not shown: it may hold a password)"
)

// DSN returns dsn for messages, every password in it replaced by Mask.
func DSN(dsn string) string {
	shown, _, _ := parse(dsn)
	return shown
}

// Error returns err's text with dsn shown as DSN shows it and every
// password masked wherever quoted; when dsn does not parse, a fixed text
// (a parser's message may quote any part). The result wraps nothing, so
// no caller can print the original.
func Error(dsn string, err error) error {
	shown, secrets, ok := parse(dsn)
	if !ok {
		return errors.New("the connection string does not parse (the parser's message is not shown: it may quote a password)")
	}
	msg := strings.ReplaceAll(err.Error(), dsn, shown)
	var all []string
	for _, s := range secrets {
		all = append(all, s, strings.Trim(strconv.Quote(s), `"`), url.QueryEscape(s), url.PathEscape(s))
		// A parser's message may quote a piece cut at a separator.
		for _, part := range strings.FieldsFunc(s, func(r rune) bool { return strings.ContainsRune(separators, r) }) {
			if len(part) >= 3 {
				all = append(all, part)
			}
		}
	}
	// Longest first, so that a secret holding another is masked whole.
	slices.SortFunc(all, func(a, b string) int { return len(b) - len(a) })
	for _, s := range all {
		if s != "" {
			msg = strings.ReplaceAll(msg, s, Mask)
		}
	}
	return errors.New(msg)
}

// Failure is Error for an error that came after dsn parsed (a
// connection's, a query's): pgx may quote the parts it read (the user, the
// host), and when dsn's parts cannot be told apart one of those may be a
// piece of the password (postgres://u:pa@ss@host: pgx looks up the host
// "ss@host"), so then only that it failed is shown, not what.
func Failure(dsn string, err error) error {
	if _, _, ok := parse(dsn); !ok {
		return errors.New("failed (the error's text is not shown: the connection string's parts cannot be told apart, so it may quote a password)")
	}
	return Error(dsn, err)
}

// separators are the bytes a connection string parser may cut a value at.
const separators = ":/@?#&=;,'\"\\ \t\n\r\v\f"

// parse returns dsn as shown in messages, the passwords it holds (as
// written and decoded), and whether its parts could be told apart.
func parse(dsn string) (shown string, secrets []string, ok bool) {
	for _, scheme := range []string{"postgresql://", "postgres://"} {
		if rest, ok := strings.CutPrefix(dsn, scheme); ok { // pgx's test: case matters
			return parseURL(scheme, rest)
		}
	}
	return parseKeywords(dsn)
}

// parseURL reads a URL after its scheme, shown only when Go's URL parser
// accepts it, finds pgx's userinfo, and no '@' follows.
func parseURL(scheme, rest string) (shown string, secrets []string, ok bool) {
	hidden := scheme + hiddenURL
	if strings.IndexByte(rest, 0) >= 0 {
		return hidden, nil, false
	}
	if _, err := url.Parse(scheme + rest); err != nil {
		return hidden, nil, false
	}
	authEnd := len(rest)
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		authEnd = i
	}
	auth := rest[:authEnd]
	goUser, goHas := "", false
	if j := strings.LastIndexByte(auth, '@'); j >= 0 {
		goUser, goHas = auth[:j], true
	}
	pgxUser, pgxHas := "", false
	if i := strings.IndexAny(rest, "@/"); i >= 0 && rest[i] == '@' {
		pgxUser, pgxHas = rest[:i], true
	}
	if goHas != pgxHas || goUser != pgxUser {
		return hidden, nil, false
	}
	if after := rest[len(goUser):]; strings.Count(after, "@") > 1 || !goHas && strings.Contains(after, "@") {
		// An '@' after the userinfo: most likely the rest of a password
		// written with an unencoded '@', '/' or '?' (u:pa@x/y?z=ss@host).
		return hidden, nil, false
	}
	var b strings.Builder
	b.WriteString(scheme)
	if goHas {
		user, pw, has := strings.Cut(goUser, ":")
		b.WriteString(user)
		if has {
			b.WriteString(":" + Mask)
			secrets = append(secrets, decoded(pw)...)
		}
		b.WriteString("@")
		auth = auth[len(goUser)+1:]
	}
	b.WriteString(auth)
	tail := rest[authEnd:]
	tail, frag, hasFrag := strings.Cut(tail, "#")
	path, query, hasQuery := strings.Cut(tail, "?")
	b.WriteString(path)
	if hasQuery {
		pairs := strings.Split(query, "&")
		for i, pair := range pairs {
			key, val, hasVal := strings.Cut(pair, "=")
			if !hasVal || key == "" || strings.Contains(val, "=") {
				// Not key=value: maybe a password's rest after an
				// unencoded '&' or '=' (password=pa&ss).
				return hidden, nil, false
			}
			if slices.ContainsFunc(decoded(key), isPasswordKey) {
				pairs[i] = key + "=" + Mask
				secrets = append(secrets, decoded(val)...)
			}
		}
		b.WriteString("?" + strings.Join(pairs, "&"))
	}
	if hasFrag {
		// Not part of a connection string; it may be the rest of a
		// password written with a '#'.
		b.WriteString("#" + Mask)
		secrets = append(secrets, decoded(frag)...)
	}
	return b.String(), secrets, true
}

// decoded is s as written, then percent-decoded (both ways a URL decodes),
// where that differs.
func decoded(s string) []string {
	out := []string{s}
	if d, err := url.PathUnescape(s); err == nil && d != s {
		out = append(out, d)
	}
	if d, err := url.QueryUnescape(s); err == nil && d != s && d != out[len(out)-1] {
		out = append(out, d)
	}
	return out
}

// isPasswordKey reports whether a key names a password, in any case
// (PASSWORD=... goes to the server as a parameter: a secret all the same).
func isPasswordKey(key string) bool {
	return strings.Contains(strings.ToLower(key), "password")
}

// keyword is the shape of a connection string keyword or a server
// setting's name (a custom one has a dot: myapp.mode).
var keyword = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.]*$`)

// space is the white space of pgx's keyword/value parser.
const space = " \t\n\r\v\f"

// parseKeywords reads a keyword/value string the way pgx does (keys
// before '=', values quoted with ' or bare, backslash escaping), masking
// the value of every password key.
func parseKeywords(dsn string) (shown string, secrets []string, ok bool) {
	if strings.IndexByte(dsn, 0) >= 0 {
		return hiddenKeyword, nil, false
	}
	var b strings.Builder
	s := dsn
	for {
		trimmed := strings.TrimLeft(s, space)
		b.WriteString(s[:len(s)-len(trimmed)])
		s = trimmed
		if s == "" {
			return b.String(), secrets, true
		}
		eq := strings.IndexByte(s, '=')
		if eq < 0 {
			return hiddenKeyword, nil, false
		}
		key := strings.Trim(s[:eq], space)
		if !keyword.MatchString(key) {
			// Not a keyword (pgx would take u://a:b as one, and send it
			// to the server): maybe a mistyped URL holding a password.
			return hiddenKeyword, nil, false
		}
		b.WriteString(s[:eq+1])
		s = s[eq+1:]
		trimmed = strings.TrimLeft(s, space)
		b.WriteString(s[:len(s)-len(trimmed)])
		s = trimmed
		end, quoted := 0, s != "" && s[0] == '\''
		if quoted {
			end = 1
			for ; end < len(s) && s[end] != '\''; end++ {
				if s[end] == '\\' {
					end++
				}
			}
			if end >= len(s) {
				return hiddenKeyword, nil, false // unterminated
			}
			end++ // the closing quote
		} else {
			for ; end < len(s) && !strings.ContainsRune(space, rune(s[end])); end++ {
				if s[end] == '\\' {
					end++
				}
			}
			end = min(end, len(s))
		}
		val := s[:end]
		if isPasswordKey(key) && val != "" {
			b.WriteString(Mask)
			secrets = append(secrets, val, unescape(strings.TrimSuffix(strings.TrimPrefix(val, "'"), "'")))
		} else {
			b.WriteString(val)
		}
		s = s[end:]
	}
}

// unescape drops the backslashes of a keyword/value value.
func unescape(v string) string {
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		if v[i] == '\\' && i+1 < len(v) {
			i++
		}
		b.WriteByte(v[i])
	}
	return b.String()
}
