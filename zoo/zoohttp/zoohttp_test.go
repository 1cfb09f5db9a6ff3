package zoohttp

import (
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
)

// Ensure Effect posts the body, forwards the key only when there is one,
// and turns any reply but 200 into an error.
func TestEffect(t *testing.T) {
	var gotKeys []string
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		gotKeys = append(gotKeys, strings.Join(r.Header.Values(KeyHeader), ","))
		if string(b) == "fail" {
			http.Error(w, "no", http.StatusInternalServerError)
			return
		}
		io.WriteString(w, "7")
	}))
	defer sink.Close()
	t.Setenv("EFFECT_URL", sink.URL)
	for _, tc := range []struct {
		body, key, value string
		fails            bool
	}{
		{"x", "k1", "7", false},
		{"x", "", "7", false},
		{"fail", "k2", "no\n", true},
	} {
		value, err := Effect([]byte(tc.body), tc.key)
		if got, want := value, tc.value; got != want {
			t.Errorf("Effect(%q, %q) = %q, want %q", tc.body, tc.key, got, want)
		}
		if got, want := err != nil, tc.fails; got != want {
			t.Errorf("Effect(%q, %q) error = %v, want an error: %v", tc.body, tc.key, err, want)
		}
	}
	if got, want := gotKeys, []string{"k1", "", "k2"}; !slices.Equal(got, want) {
		t.Errorf("keys the sink saw = %q, want %q", got, want)
	}
}

// Ensure ReadRequest answers an oversized body 413 and a malformed key 400,
// and passes every other request on with its body and key.
func TestReadRequest(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		key        []string
		ok         bool
		status     int
	}{
		{"unkeyed", "b", nil, true, 200},
		{"keyed", "b", []string{"k-1"}, true, 200},
		{"empty key", "b", []string{""}, false, 400},
		{"malformed key", "b", []string{"a b"}, false, 400},
		{"body over MaxBody", strings.Repeat("b", MaxBody+1), []string{"k"}, false, 413},
		{"body of MaxBody", strings.Repeat("b", MaxBody), nil, true, 200},
	} {
		r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(tc.body))
		for _, k := range tc.key {
			r.Header.Add(KeyHeader, k)
		}
		w := httptest.NewRecorder()
		req, ok := ReadRequest(w, r, KeySyntax)
		if ok != tc.ok || w.Code != tc.status {
			t.Errorf("%s: ReadRequest = ok %v, status %d, want ok %v, status %d", tc.name, ok, w.Code, tc.ok, tc.status)
		}
		if ok && (string(req.Body) != tc.body || req.Keyed != (tc.key != nil)) {
			t.Errorf("%s: ReadRequest = %+v, want body %q, keyed %v", tc.name, req, tc.body, tc.key != nil)
		}
	}
}

// Ensure a journal reads back what was appended, in order, skipping lines
// that do not decode, and that appending nothing writes nothing.
func TestJournal(t *testing.T) {
	type rec struct{ K, V string }
	t.Setenv("STATE", t.TempDir())
	j, err := OpenJournal[rec]("j.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Append(rec{"a", "1"}, rec{"b", "2"}); err != nil {
		t.Fatal(err)
	}
	if _, err := j.f.WriteString("not json\n"); err != nil {
		t.Fatal(err)
	}
	if err := j.Append(); err != nil {
		t.Fatal(err)
	}
	if err := j.Append(rec{"a", "3"}); err != nil {
		t.Fatal(err)
	}
	j.Close()
	if j, err = OpenJournal[rec]("j.jsonl"); err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(j.f)
	j.Close()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Count(string(b), "\n"), 4; got != want {
		t.Errorf("lines in the file = %d, want %d:\n%s", got, want, b)
	}
	var got []rec
	LoadJournal("j.jsonl", func(r rec) { got = append(got, r) }).Close()
	if want := []rec{{"a", "1"}, {"b", "2"}, {"a", "3"}}; !slices.Equal(got, want) {
		t.Errorf("LoadJournal read %v, want %v", got, want)
	}
}
