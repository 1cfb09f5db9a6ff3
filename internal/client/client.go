// Package client is the lab's HTTP client, the one every lab caller uses.
// It opens one connection per call, keep-alives off: Go's http.Transport
// silently resends a request with an Idempotency-Key when a reused
// connection fails before any reply, an invisible retry of exactly the
// kind the lab counts. A body above ExpectContinueAbove waits for 100
// Continue: a server refusing it from its headers (413) closes at once,
// and a client still writing would see a reset instead of the 413.
package client

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"syscall"
	"time"

	"idemlab/internal/protocol"
)

// EffectURL is the URL of protocol.EffectPath on a server listening at addr (host:port).
func EffectURL(addr string) string { return "http://" + addr + protocol.EffectPath }

// ExpectContinueAbove is the largest body sent without Expect:
// 100-continue, below protocol.DefaultMaxBody: every body the lab's limit
// refuses waits for the server's word.
const ExpectContinueAbove = 1024

// A Request is one call for one intent: a POST to protocol.EffectPath
// unless its Shape says otherwise (a target's own method and headers).
type Request struct {
	Key   *string // Idempotency-Key sent verbatim (a case may send a malformed one); nil sends none
	Fault string  // X-Lab-Fault value; empty sends none
	Tag   string  // X-Lab-Attempt value (the fault proxy's, never a server's); empty sends none
	Body  []byte
	Shape *Shape // nil: the lab's own protocol
	// ContentType, when set, is sent instead of the shape's ("" sends none).
	ContentType *string
	Timeout     time.Duration // if more than 0, this call's timeout instead of the client's
}

// A Shape is how a target takes a request: its method, the header its key
// goes in, and the Content-Type sent ("" sends none).
type Shape struct {
	Method      string
	KeyHeader   string
	ContentType string
}

// labShape is the effect server's.
var labShape = Shape{Method: http.MethodPost, KeyHeader: protocol.KeyHeader, ContentType: "text/plain"}

// A Reply is the HTTP response to a Request.
type Reply struct {
	Status     int
	Body       []byte
	Replayed   *bool         // the Idempotency-Replayed header: nil when absent or neither "true" nor "false"
	RetryAfter time.Duration // the wait Retry-After asks for; 0 when absent or unreadable
	// Header holds every reply header (a target marks a replay its own way).
	Header http.Header
}

// A Client makes the lab's calls. Its methods are safe for concurrent use.
type Client struct {
	http *http.Client
}

// New returns a client that gives up on a call (to its last byte) after timeout.
func New(timeout time.Duration) *Client {
	return &Client{http: &http.Client{
		Timeout: timeout,
		// The body waits for the server's 100 Continue or final reply as
		// long as the whole call may take: never sent by guesswork.
		Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil, ExpectContinueTimeout: timeout},
	}}
}

// Post sends r to url and reads the whole reply. An error means no complete
// reply arrived; Classify says how the call failed.
func (c *Client) Post(ctx context.Context, url string, r Request) (Reply, error) {
	if r.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.Timeout)
		defer cancel()
	}
	shape := labShape
	if r.Shape != nil {
		shape = *r.Shape
	}
	req, err := http.NewRequestWithContext(ctx, shape.Method, url, bytes.NewReader(r.Body))
	if err != nil {
		return Reply{}, err
	}
	if r.ContentType != nil {
		shape.ContentType = *r.ContentType
	}
	if shape.ContentType != "" {
		req.Header.Set("Content-Type", shape.ContentType)
	}
	if len(r.Body) > ExpectContinueAbove {
		req.Header.Set("Expect", "100-continue")
	}
	if r.Key != nil {
		req.Header[http.CanonicalHeaderKey(shape.KeyHeader)] = []string{*r.Key} // the value verbatim, not checked
	}
	if r.Fault != "" {
		req.Header.Set(protocol.FaultHeader, r.Fault)
	}
	if r.Tag != "" {
		req.Header.Set(protocol.AttemptHeader, r.Tag)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return Reply{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return Reply{}, err
	}
	out := Reply{Status: resp.StatusCode, Body: body, RetryAfter: ParseRetryAfter(resp.Header.Get(protocol.RetryAfterHeader), time.Now()), Header: resp.Header}
	if v := resp.Header.Get(protocol.ReplayedHeader); v == "true" || v == "false" {
		replayed := v == "true"
		out.Replayed = &replayed
	}
	return out, nil
}

// Close closes the client's idle connections (none, with keep-alives off).
func (c *Client) Close() { c.http.CloseIdleConnections() }

// Classify maps the error of a failed call to an outcome that is the same
// on every machine: refused, timeout or no reply.
func Classify(err error) protocol.Outcome {
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return protocol.OutcomeRefused
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return protocol.OutcomeTimeout
	default:
		return protocol.OutcomeNoReply
	}
}

// ParseRetryAfter reads a Retry-After value (RFC 9110 section 10.2.3): a
// number of seconds, or an HTTP date; anything else is 0, no wait.
func ParseRetryAfter(v string, now time.Time) time.Duration {
	if s, err := strconv.ParseUint(v, 10, 32); err == nil {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}
