package redact

import (
	"testing"
)

func TestRedact(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"postgres://u:pw@db:5432/x?sslmode=disable", "postgres://u:xxxxx@db:5432/x?sslmode=disable"},
		{"postgresql://u@db/x", "postgresql://u@db/x"},
		{"postgres://u@db/x?password=pw", "postgres://u@db/x?password=xxxxx"},
		{"host=db user=u password=pw dbname=x", "host=db user=u password=xxxxx dbname=x"},
		{"host=db password = 'p w\\'s' dbname=x", "host=db password = xxxxx dbname=x"},
		{"host=db dbname=x", "host=db dbname=x"},
		{"host=db password='unterminated quote", "host=db password=xxxxx"},
	} {
		if got := DSN(tc.in); got != tc.want {
			t.Errorf("DSN(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
