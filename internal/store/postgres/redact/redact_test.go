package redact

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Ensure a well-formed connection string is shown whole but for its
// passwords, and one whose parts cannot be told apart is not shown.
func TestDSN(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"postgres://u:pw@db:5432/x?sslmode=disable", "postgres://u:xxxxx@db:5432/x?sslmode=disable"},
		{"postgresql://u@db/x", "postgresql://u@db/x"},
		{"postgres://u@db/x?password=pw", "postgres://u@db/x?password=xxxxx"},
		{"postgres://u@db/x?sslmode=require&sslpassword=pw", "postgres://u@db/x?sslmode=require&sslpassword=xxxxx"},
		{"postgres://u@db/x?PassWord=pw&a=b", "postgres://u@db/x?PassWord=xxxxx&a=b"},
		{"postgres://u@db/x?pass%77ord=pw", "postgres://u@db/x?pass%77ord=xxxxx"},
		{"postgres://u:p%40w@h1,h2:5433/x", "postgres://u:xxxxx@h1,h2:5433/x"},
		{"postgres://u:pw@/x?host=/tmp", "postgres://u:xxxxx@/x?host=/tmp"},
		{"POSTGRES://u:pw@db/x", hiddenKeyword}, // pgx reads it as keyword/value, and fails
		{"postgres://u@db/x?password=pa&ss", "postgres://" + hiddenURL},
		{"postgres://u@db/x?password=pa=ss", "postgres://" + hiddenURL},
		{"postgres://u:pw@db/x#frag", "postgres://u:xxxxx@db/x#xxxxx"},
		{"postgres://u:se/cret@host/db", "postgres://" + hiddenURL},
		{"postgres://u:se?cret@host/db", "postgres://" + hiddenURL},
		{"postgres://h?a=u:secret@h2/db", "postgres://" + hiddenURL},
		{"postgres://u:se@host/x?y=cret@host/db", "postgres://" + hiddenURL},
		{"postgres://u:12/cret@host", "postgres://" + hiddenURL},
		{"host=db user=u password=pw dbname=x", "host=db user=u password=xxxxx dbname=x"},
		{"host=db PASSWORD=pw dbname=x", "host=db PASSWORD=xxxxx dbname=x"},
		{"host=db sslpassword=pw", "host=db sslpassword=xxxxx"},
		{"host=db password = 'p w\\'s' dbname=x", "host=db password = xxxxx dbname=x"},
		{"host=db password=p\\ w dbname=x", "host=db password=xxxxx dbname=x"},
		{"host=db dbname=x", "host=db dbname=x"},
		{"host=db password='unterminated quote", hiddenKeyword},
		{"host=db password=pw stray", hiddenKeyword},
		{"POSTGRES://u:pw=x@host/db", hiddenKeyword},
		{"host=db app.mode=x password=pw", "host=db app.mode=x password=xxxxx"},
	} {
		if got := DSN(tc.in); got != tc.want {
			t.Errorf("DSN(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// Shapes of connection strings with the password at %s, URL and keyword
// forms, well-formed or not.
var shapes = []string{
	"postgres://u:%s@host/db",
	"postgresql://u:%s@host:5432/db?sslmode=disable",
	"postgres://u:%s@h1:5432,h2:5433/db",
	"postgres://u:%s@[::1]:5432/db",
	"postgres://u:%s@/db?host=/tmp",
	"postgres://u@host/db?password=%s",
	"postgres://u@host/db?sslpassword=%s&sslmode=require",
	"postgres://u@host/db?PASSWORD=%s",
	"postgres://u@host/db?sslmode=bogus&password=%s",
	"postgres://u:%s@host/db?connect_timeout=x",
	"postgres://u:%s@host:port/db",
	"POSTGRES://u:%s@host/db",
	"host=h password=%s",
	"host=h PASSWORD=%s dbname=x",
	"host=h Password = '%s'",
	"host=h sslpassword=%s sslmode=require",
	"password='%s' host=h",
	"password=%s host=h sslmode=bogus",
	"user=u password=\t%s connect_timeout=x",
}

// leaks reports whether text shows any part of the secret left or right.
func leaks(text, left, right string) bool {
	return strings.Contains(text, left) || strings.Contains(text, right)
}

// Ensure no shape shows its password, whatever bytes it holds, neither in
// DSN nor in Error over what pgx's own parsers say about it.
func TestPasswordNeverShown(t *testing.T) {
	const left, right = "SeKrEt", "PaSsWd"
	for _, sep := range []string{"", "/", "@", ":", "?", "#", "&", "=", "%2F", "%40", "%", "'", `\`, `\'`, "\"", "\t", "+", ",", "[", "]", "é"} {
		secret := left + sep + right
		for _, shape := range shapes {
			dsn := fmt.Sprintf(shape, secret)
			if got := DSN(dsn); leaks(got, left, right) {
				t.Errorf("DSN(%q) = %q: shows the password", dsn, got)
			}
			for name, parse := range map[string]func(string) error{
				"pgconn.ParseConfig":  func(s string) error { _, err := pgconn.ParseConfig(s); return err },
				"pgxpool.ParseConfig": func(s string) error { _, err := pgxpool.ParseConfig(s); return err },
			} {
				err := parse(dsn)
				if err == nil {
					err = errors.New("connect to " + dsn + ": refused") // what a caller might wrap
				}
				if got := Error(dsn, err).Error(); leaks(got, left, right) {
					t.Errorf("Error(%q, %s's error) = %q: shows the password", dsn, name, got)
				}
			}
		}
	}
}

// Ensure no password written into any shape, whatever the bytes around
// it, is shown by DSN or by Error over pgx's parse error. Only the
// password's first part is checked: bytes after it (a space, a quote, an
// '&') can legitimately end the password and start another field.
func FuzzPasswordNeverShown(f *testing.F) {
	for i := range shapes {
		f.Add(i, "/")
		f.Add(i, "@x/y?z=")
		f.Add(i, "' dbname='")
	}
	f.Fuzz(func(t *testing.T, shape int, middle string) {
		if shape < 0 || shape >= len(shapes) {
			return
		}
		const left = "SeKrEt"
		dsn := fmt.Sprintf(shapes[shape], left+middle+"PaSsWd")
		if got := DSN(dsn); strings.Contains(got, left) {
			t.Fatalf("DSN(%q) = %q: shows the password", dsn, got)
		}
		_, err := pgconn.ParseConfig(dsn)
		if err == nil {
			err = errors.New("connect to " + dsn + ": refused")
		}
		if got := Error(dsn, err).Error(); strings.Contains(got, left) {
			t.Fatalf("Error(%q, %v) = %q: shows the password", dsn, err, got)
		}
	})
}

// Ensure what pgx itself reads as the password of any connection string
// is gone from what DSN shows: read back by pgx, the shown string holds no
// password equal to it, and no run-time parameter named like a password
// (PASSWORD=...) holds anything but the mask.
func FuzzShownHidesWhatPgxReads(f *testing.F) {
	for _, shape := range shapes {
		f.Add(fmt.Sprintf(shape, "pw1"))
	}
	f.Fuzz(func(t *testing.T, dsn string) {
		cfg, err := pgconn.ParseConfig(dsn)
		if err != nil || cfg.Password == "" || cfg.Password == Mask {
			return
		}
		shown := DSN(dsn)
		again, err := pgconn.ParseConfig(shown)
		if err != nil {
			return // hidden, or not a connection string any more
		}
		if again.Password == cfg.Password {
			t.Fatalf("DSN(%q) = %q: pgx reads the password %q from it", dsn, shown, cfg.Password)
		}
		for k, v := range again.RuntimeParams {
			if isPasswordKey(k) && v != Mask {
				t.Fatalf("DSN(%q) = %q: pgx reads the password %q from it as %s", dsn, shown, cfg.Password, k)
			}
		}
	})
}

// Ensure Failure shows an error after the parse with the password masked,
// and none of its text for a string whose parts cannot be told apart:
// pgx reads u:pa@SeKrEt@host's host as "SeKrEt@host" and says so.
func TestFailure(t *testing.T) {
	err := errors.New("failed to connect: lookup SeKrEt@host: no such host")
	if got := Failure("postgres://u:pa@SeKrEt@host/db", err).Error(); strings.Contains(got, "SeKrEt") || !strings.Contains(got, "not shown") {
		t.Errorf("Failure(unparseable) = %q, want its text not shown", got)
	}
	err = errors.New("connect to postgres://u:SeKrEt@host/db: dial tcp: connection refused")
	got := Failure("postgres://u:SeKrEt@host/db", err).Error()
	if want := "connect to postgres://u:" + Mask + "@host/db: dial tcp: connection refused"; got != want {
		t.Errorf("Failure = %q, want %q", got, want)
	}
}
