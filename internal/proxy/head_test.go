package proxy

import (
	"bufio"
	"bytes"
	"net/http"
	"reflect"
	"strings"
	"testing"
)

// edited returns head edited the way the proxy forwards a request whose
// route sets X-Test-Crash: yes.
func edited(h head) []byte {
	add := http.Header{"X-Test-Crash": {"yes"}, "Connection": {"close"}}
	return h.edit([]string{"X-Lab-Fault", "X-Test-Crash", "Connection"}, add)
}

// Ensure a head is forwarded byte for byte but for the fields the proxy
// removes (any case, with their continuation lines) and the ones it adds,
// and that bytes which are not a head are refused.
func TestSplitAndEditHead(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string // "" when splitHead must fail
	}{{
		name: "order, case and spacing are kept; the fault and Connection go",
		in:   "POST /effect HTTP/1.1\r\nhost: p\r\nIDEMPOTENCY-key:   k \t\r\nX-Lab-Fault: drop-reply\r\nconnection: keep-alive\r\nContent-Length: 1\r\n\r\n",
		want: "POST /effect HTTP/1.1\r\nhost: p\r\nIDEMPOTENCY-key:   k \t\r\nContent-Length: 1\r\nConnection: close\r\nX-Test-Crash: yes\r\n\r\n",
	}, {
		name: "bare line feeds are kept",
		in:   "GET / HTTP/1.1\nHost: p\nA: 1\n\n",
		want: "GET / HTTP/1.1\nHost: p\nA: 1\nConnection: close\r\nX-Test-Crash: yes\r\n\n",
	}, {
		name: "a continuation goes with its field",
		in:   "GET / HTTP/1.1\r\nHost: p\r\nx-lab-fault: slow,\r\n stall=1ms\r\nA: 1\r\n\t2\r\n\r\n",
		want: "GET / HTTP/1.1\r\nHost: p\r\nA: 1\r\n\t2\r\nConnection: close\r\nX-Test-Crash: yes\r\n\r\n",
	}, {
		name: "a field the route sets is replaced",
		in:   "GET / HTTP/1.1\r\nx-test-crash: no\r\nHost: p\r\n\r\n",
		want: "GET / HTTP/1.1\r\nHost: p\r\nConnection: close\r\nX-Test-Crash: yes\r\n\r\n",
	},
		{name: "no empty line", in: "GET / HTTP/1.1\r\nHost: p\r\n"},
		{name: "no line at all", in: "GET / HTTP/1.1"},
		{name: "a continuation first", in: "GET / HTTP/1.1\r\n x: 1\r\n\r\n"},
		{name: "a field without a name", in: "GET / HTTP/1.1\r\n: 1\r\n\r\n"},
		{name: "a field without a colon", in: "GET / HTTP/1.1\r\nx\r\n\r\n"},
		{name: "bytes after the head", in: "GET / HTTP/1.1\r\n\r\nbody"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := splitHead([]byte(tt.in))
			if tt.want == "" {
				if err == nil {
					t.Fatalf("splitHead(%q) succeeded", tt.in)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := joined(h); got != tt.in {
				t.Errorf("joined parts = %q, want %q", got, tt.in)
			}
			if got := string(edited(h)); got != tt.want {
				t.Errorf("edited = %q\nwant     %q", got, tt.want)
			}
		})
	}
}

func joined(h head) string {
	var b strings.Builder
	b.Write(h.line)
	for _, f := range h.fields {
		b.Write(f.raw)
	}
	b.Write(h.end)
	return b.String()
}

// Ensure that for any request net/http accepts, splitHead splits its head
// into parts that join to it byte for byte, name the fields net/http saw,
// and edit to a head net/http reads as the same request less the removed
// fields plus the added ones.
func FuzzHead(f *testing.F) {
	for _, s := range []string{
		"POST /effect HTTP/1.1\r\nHost: p\r\nIdempotency-Key: k\r\nX-Lab-Fault: drop-reply\r\nContent-Length: 3\r\n\r\nabc",
		"GET / HTTP/1.1\nHost: p\nA: 1\n 2\nConnection: keep-alive, x\n\n",
		"POST / HTTP/1.1\r\nHost: p\r\nTransfer-Encoding: chunked\r\nTrailer: T\r\n\r\n1\r\na\r\n0\r\nT: v\r\n\r\n",
		"GET http://h/x?q HTTP/1.0\r\nPragma: no-cache\r\nx-test-crash: a\r\nX-Test-Crash: b\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: p\r\nK: \x80\xff\t\"!#$%&'*+-.^_`|~\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		rec := &recorder{r: bytes.NewReader(data), n: HeaderBytes, keep: true}
		br := bufio.NewReader(rec)
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		raw := rec.buf[:len(rec.buf)-br.Buffered()]
		h, err := splitHead(raw)
		if err != nil {
			t.Fatalf("net/http read %q, splitHead: %v", raw, err)
		}
		if got := joined(h); got != string(raw) {
			t.Fatalf("joined parts = %q, want %q", got, raw)
		}
		for name := range req.Header {
			if h.count(name) == 0 && name != "Cache-Control" { // net/http adds Cache-Control for Pragma: no-cache
				t.Fatalf("net/http saw field %q, splitHead none in %q", name, raw)
			}
		}

		out := edited(h)
		again, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(out)))
		if err != nil {
			t.Fatalf("edited head %q does not read: %v (from %q)", out, err, raw)
		}
		want := req.Header.Clone()
		delete(want, "X-Lab-Fault")
		want["Connection"] = []string{"close"}
		want["X-Test-Crash"] = []string{"yes"}
		if cc := again.Header["Cache-Control"]; cc != nil && want["Cache-Control"] == nil {
			want["Cache-Control"] = cc // net/http's Pragma fix-up, once per read
		}
		if again.Method != req.Method || again.RequestURI != req.RequestURI || again.Proto != req.Proto ||
			again.Host != req.Host || !reflect.DeepEqual(again.Header, want) ||
			again.ContentLength != req.ContentLength || !reflect.DeepEqual(again.TransferEncoding, req.TransferEncoding) {
			t.Fatalf("edited head reads as\n%s %s %s host %q %v cl %d te %v\nwant\n%s %s %s host %q %v cl %d te %v\nfrom %q",
				again.Method, again.RequestURI, again.Proto, again.Host, again.Header, again.ContentLength, again.TransferEncoding,
				req.Method, req.RequestURI, req.Proto, req.Host, want, req.ContentLength, req.TransferEncoding, raw)
		}
	})
}
