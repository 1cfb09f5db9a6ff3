package audit

import (
	"fmt"
	"strings"

	"idemlab/internal/audit/stormmodel"
)

// jitterSVG draws the jitter model run with p (jitter.svg): one panel per
// strategy, top to bottom, each a histogram of retries per bucket with its
// own axes, in the figure's published layout (all integer arithmetic, so
// no float formatting is involved).
func jitterSVG(p stormmodel.Parameters) []byte {
	const (
		width, header, panelHeight, footer = 960, 56, 230, 10
		left                               = 80
	)
	model, _ := stormmodel.Run(p)
	height := header + panelHeight*len(model) + footer
	var b strings.Builder
	line := func(format string, args ...any) {
		fmt.Fprintf(&b, format, args...)
		b.WriteByte('\n')
	}
	line(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`, width, height, width, height)
	line(`<rect x="0" y="0" width="%d" height="%d" fill="#ffffff"/>`, width, height)
	line(`<text x="%d" y="24" font-size="17" font-weight="bold">Retries per %d ms: %d clients fail at t = 0, each retries %d times</text>`,
		left, p.BucketMS, p.Clients, p.Retries)
	line(`<text x="%d" y="44" fill="#555555">base %d ms, cap %d ms, mulberry32 seed %d; each panel has its own scale</text>`,
		left, p.BaseMS, p.CapMS, p.Seed)
	for i, s := range model {
		drawPanel(line, s, p.BucketMS, header+i*panelHeight)
	}
	b.WriteString("</svg>\n")
	return []byte(b.String())
}

// drawPanel draws one strategy's histogram with its top edge at y0.
func drawPanel(line func(string, ...any), s stormmodel.Strategy, bucket, y0 int) {
	const (
		width, left, right = 960, 80, 30
		plotTop, plotH     = 34, 150
		ticksY, ticksX     = 5, 10
	)
	w := width - left - right
	top, bottom := y0+plotTop, y0+plotTop+plotH
	line(`<g id="%s">`, s.Name)
	line(`<text x="%d" y="%d" font-size="14" font-weight="bold">%s: peak %d retries in one %d ms bucket (%d retries in all)</text>`,
		left, y0+20, s.Name, s.Peak, bucket, s.Total)
	n := max(len(s.Buckets), 1)
	yTop, yStep := axis(max(s.Peak, 1), ticksY)
	xTopMS, xStep := axis(n*bucket, ticksX)
	span := max(xTopMS/bucket, n)
	for v := 0; v <= yTop; v += yStep {
		y := bottom - v*plotH/yTop
		line(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#e0e0e0"/>`, left, y, left+w, y)
		line(`<text x="%d" y="%d" text-anchor="end">%d</text>`, left-6, y+4, v)
	}
	// Each pixel column shows the largest bucket it covers; equal
	// neighbouring columns merge into one bar.
	col := make([]int, w)
	for i, c := range s.Buckets {
		from := i * w / span
		to := max((i+1)*w/span, from+1)
		for x := from; x < to && x < w; x++ {
			col[x] = max(col[x], c)
		}
	}
	line(`<g fill="#3366aa">`)
	for x := 0; x < w; {
		end := x + 1
		for end < w && col[end] == col[x] {
			end++
		}
		if c := col[x]; c > 0 {
			h := max((c*plotH+yTop/2)/yTop, 1)
			line(`<rect x="%d" y="%d" width="%d" height="%d"/>`, left+x, bottom-h, end-x, h)
		}
		x = end
	}
	line(`</g>`)
	line(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#000000"/>`, left, bottom, left+w, bottom)
	line(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#000000"/>`, left, top, left, bottom)
	for t := 0; t <= span*bucket; t += xStep {
		x := left + t*w/(span*bucket)
		line(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#000000"/>`, x, bottom, x, bottom+5)
		line(`<text x="%d" y="%d" text-anchor="middle">%d</text>`, x, bottom+18, t)
	}
	line(`<text x="%d" y="%d" text-anchor="middle">time since the failure (ms)</text>`, left+w/2, bottom+36)
	mid := (top + bottom) / 2
	line(`<text x="%d" y="%d" text-anchor="middle" transform="rotate(-90 %d %d)">retries per %d ms</text>`, left-50, mid, left-50, mid, bucket)
	line(`</g>`)
}

// axis returns the smallest axis top ≥ v whose step, 1, 2 or 5 times a
// power of ten, divides it into at most ticks steps.
func axis(v, ticks int) (top, step int) {
	for mag := 1; ; mag *= 10 {
		for _, m := range []int{1, 2, 5} {
			step = m * mag
			if k := (v + step - 1) / step; k <= ticks {
				return k * step, step
			}
		}
	}
}
