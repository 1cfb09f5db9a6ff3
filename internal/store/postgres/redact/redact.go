// Package redact shows a PostgreSQL connection string without its password.
package redact

import (
	"net/url"
	"regexp"
	"strings"
)

// DSN returns dsn with its password, if any, replaced by xxxxx, for
// messages: the URL form's user password and password parameter, and the
// keyword/value form's password=… (quoted or not).
func DSN(dsn string) string {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return brokenURLPassword.ReplaceAllString(dsn, ":xxxxx@")
		}
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		}
		if q := u.Query(); q.Has("password") {
			q.Set("password", "xxxxx")
			u.RawQuery = q.Encode()
		}
		return u.String()
	}
	return keywordPassword.ReplaceAllString(dsn, "${1}xxxxx")
}

var (
	keywordPassword   = regexp.MustCompile(`(password\s*=\s*)('(?:[^'\\]|\\.)*'?|[^\s']\S*)`)
	brokenURLPassword = regexp.MustCompile(`:[^:@/]*@`)
)
