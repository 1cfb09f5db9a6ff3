package jitter

import (
	"bytes"
	"fmt"
	"strconv"
)

// Layout of the SVG, in pixels. Every coordinate written is an integer
// computed with integer arithmetic, so the bytes never depend on float
// formatting.
const (
	svgWidth    = 960
	headerH     = 56  // figure title and subtitle
	panelH      = 230 // one strategy's panel, labels included
	plotLeft    = 80  // left edge of the plot area (y labels to its left)
	plotRight   = 30  // right margin
	plotTop     = 34  // panel top to plot top (panel title above)
	plotHeight  = 150 // plot area height
	maxTicksY   = 5
	maxTicksX   = 10
	footerExtra = 10
)

// SVG draws r as one SVG image: one panel per strategy, top to bottom, each
// a histogram of retries per bucket with its own axes (x: time since the
// failure in ms, y: retries per bucket), tick labels, and a title naming
// the strategy and its peak. Each panel scales to its own data; compare the
// peaks in the titles. The same Result always gives the same bytes.
func SVG(r Result) []byte {
	p := r.Parameters
	height := headerH + panelH*len(r.Strategies) + footerExtra
	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		svgWidth, height, svgWidth, height)
	fmt.Fprintf(&b, `<rect x="0" y="0" width="%d" height="%d" fill="#ffffff"/>`+"\n", svgWidth, height)
	fmt.Fprintf(&b, `<text x="%d" y="24" font-size="17" font-weight="bold">Retries per %d ms: %d clients fail at t = 0, each retries %d times</text>`+"\n",
		plotLeft, p.BucketMS, p.Clients, p.Retries)
	fmt.Fprintf(&b, `<text x="%d" y="44" fill="#555555">base %d ms, cap %d ms, mulberry32 seed %d; each panel has its own scale</text>`+"\n",
		plotLeft, p.BaseMS, p.CapMS, p.Seed)
	for i, s := range r.Strategies {
		panel(&b, s, p.BucketMS, headerH+i*panelH)
	}
	b.WriteString("</svg>\n")
	return b.Bytes()
}

// panel draws one strategy's histogram with its top edge at y0.
func panel(b *bytes.Buffer, s Strategy, bucketMS, y0 int) {
	w := svgWidth - plotLeft - plotRight
	top := y0 + plotTop
	bottom := top + plotHeight
	fmt.Fprintf(b, `<g id="%s">`+"\n", xmlEscape(s.Name))
	fmt.Fprintf(b, `<text x="%d" y="%d" font-size="14" font-weight="bold">%s: peak %d retries in one %d ms bucket (%d retries in all)</text>`+"\n",
		plotLeft, y0+20, xmlEscape(s.Name), s.Peak, bucketMS, s.Total)

	n := max(len(s.Buckets), 1) // buckets on the x axis
	yMax, yStep := niceAxis(max(s.Peak, 1), maxTicksY)
	xMaxMS, xStep := niceAxis(n*bucketMS, maxTicksX)
	span := xMaxMS / bucketMS // buckets across the plot width
	if span < n {
		span = n
	}

	// Grid lines and y tick labels.
	for v := 0; v <= yMax; v += yStep {
		y := bottom - v*plotHeight/yMax
		fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#e0e0e0"/>`+"\n", plotLeft, y, plotLeft+w, y)
		fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="end">%d</text>`+"\n", plotLeft-6, y+4, v)
	}

	// Bars: each bucket covers columns [b·w/span, (b+1)·w/span), at least
	// one; a column shows the largest count of the buckets it covers, so
	// the peak stays visible however many buckets share a pixel. Runs of
	// equal columns become one rectangle.
	cols := make([]int, w)
	for i, c := range s.Buckets {
		x0 := i * w / span
		x1 := max((i+1)*w/span, x0+1)
		for x := x0; x < x1 && x < w; x++ {
			cols[x] = max(cols[x], c)
		}
	}
	fmt.Fprintf(b, `<g fill="#3366aa">`+"\n")
	for x := 0; x < w; {
		c := cols[x]
		end := x + 1
		for end < w && cols[end] == c {
			end++
		}
		if c > 0 {
			h := max((c*plotHeight+yMax/2)/yMax, 1)
			fmt.Fprintf(b, `<rect x="%d" y="%d" width="%d" height="%d"/>`+"\n", plotLeft+x, bottom-h, end-x, h)
		}
		x = end
	}
	b.WriteString("</g>\n")

	// Axes, x ticks and labels.
	fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#000000"/>`+"\n", plotLeft, bottom, plotLeft+w, bottom)
	fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#000000"/>`+"\n", plotLeft, top, plotLeft, bottom)
	for t := 0; t <= span*bucketMS; t += xStep {
		x := plotLeft + t*w/(span*bucketMS)
		fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#000000"/>`+"\n", x, bottom, x, bottom+5)
		fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="middle">%s</text>`+"\n", x, bottom+18, strconv.Itoa(t))
	}
	fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="middle">time since the failure (ms)</text>`+"\n", plotLeft+w/2, bottom+36)
	mid := (top + bottom) / 2
	fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="middle" transform="rotate(-90 %d %d)">retries per %d ms</text>`+"\n",
		plotLeft-50, mid, plotLeft-50, mid, bucketMS)
	b.WriteString("</g>\n")
}

// niceAxis returns an axis maximum ≥ v and a tick step from 1, 2 or 5
// times a power of ten giving at most maxTicks steps.
func niceAxis(v, maxTicks int) (top, step int) {
	for mag := 1; ; mag *= 10 {
		for _, m := range []int{1, 2, 5} {
			step = m * mag
			if (v+step-1)/step <= maxTicks {
				return (v + step - 1) / step * step, step
			}
		}
	}
}

// xmlEscape escapes text for an SVG text node or attribute.
func xmlEscape(s string) string {
	var b bytes.Buffer
	for _, r := range s {
		switch r {
		case '<':
			b.WriteString("&lt;")
		case '>':
			b.WriteString("&gt;")
		case '&':
			b.WriteString("&amp;")
		case '"':
			b.WriteString("&quot;")
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}
