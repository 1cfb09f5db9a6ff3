// Command fiber-v3-idempotency is an idemlab target: Fiber v3's idempotency
// middleware (github.com/gofiber/fiber/v3/middleware/idempotency) with its
// default config and so its in-memory storage and lock, used as its docs'
// "Default Config (Skip Safe Methods)" example shows, in front of one handler
// that performs the lab's effect: it POSTs the request's body to EFFECT_URL
// (the lab's sink) and answers 200 with the sink's value. See README.md.
//
// Usage:
//
//	PORT=N EFFECT_URL=URL go run .
//
// It serves POST /effect on 127.0.0.1:PORT (0: a free port) and prints
// "READY <port>" once it listens. It exits 1 when it cannot start or stops
// serving; SIGTERM and SIGKILL end it at once (no graceful shutdown).
package main

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"

	"github.com/gofiber/fiber/v3"
	"github.com/gofiber/fiber/v3/middleware/idempotency"
)

func main() { os.Exit(run(os.Stdout, os.Stderr)) }

func run(stdout, stderr io.Writer) int {
	effectURL := os.Getenv("EFFECT_URL")
	if effectURL == "" {
		fmt.Fprintln(stderr, "fiber-v3-idempotency: EFFECT_URL is not set")
		return 1
	}
	app := fiber.New()
	// Docs, "Default Config (Skip Safe Methods)": every default (key header
	// X-Idempotency-Key, 36-character keys, 30 min lifetime, in-memory
	// storage and lock).
	app.Use(idempotency.New())
	app.Post("/effect", func(c fiber.Ctx) error {
		value, err := applyEffect(effectURL, c.Body())
		if err != nil {
			// Fiber's idiom: the handler returns the error and Fiber's
			// default error handler answers 500 with its text.
			return err
		}
		c.Type("txt")
		return c.Status(fiber.StatusOK).Send(value)
	})

	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", os.Getenv("PORT")))
	if err != nil {
		fmt.Fprintf(stderr, "fiber-v3-idempotency: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "READY %d\n", ln.Addr().(*net.TCPAddr).Port)
	// The banner is the only thing the harness turns off: stdout carries the
	// READY line.
	if err := app.Listener(ln, fiber.ListenConfig{DisableStartupMessage: true}); err != nil {
		fmt.Fprintf(stderr, "fiber-v3-idempotency: serve: %v\n", err)
		return 1
	}
	return 0
}

// applyEffect POSTs body to the sink and returns its reply, the effect's
// value; a reply other than 200 is an error.
func applyEffect(effectURL string, body []byte) ([]byte, error) {
	resp, err := http.Post(effectURL, "text/plain", bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("effect: %w", err)
	}
	defer resp.Body.Close()
	value, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("effect: read reply: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("effect sink answered %d: %s", resp.StatusCode, value)
	}
	return value, nil
}
