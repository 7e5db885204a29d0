package main

import (
	"context"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"math"
	"strconv"
	"strings"
	"time"

	xdraw "golang.org/x/image/draw"
	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// Dashboard is the part of a Grafana dashboard dashshot draws.
type Dashboard struct {
	Title  string  `json:"title"`
	Panels []Panel `json:"panels"`
}

// Panel is a row, stat or timeseries panel.
type Panel struct {
	Type    string `json:"type"`
	Title   string `json:"title"`
	GridPos struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Targets []struct {
		Expr         string `json:"expr"`
		LegendFormat string `json:"legendFormat"`
	} `json:"targets"`
	FieldConfig struct {
		Defaults struct {
			Unit string `json:"unit"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
}

// The layout: Grafana's 24 columns, 30 px per grid unit.
const (
	colW   = 64
	unitH  = 30
	margin = 12
	header = 44
	gap    = 4
)

var (
	bg      = color.RGBA{0x11, 0x12, 0x17, 0xff}
	panelBg = color.RGBA{0x18, 0x1b, 0x1f, 0xff}
	border  = color.RGBA{0x2c, 0x32, 0x35, 0xff}
	text    = color.RGBA{0xcc, 0xcc, 0xdc, 0xff}
	dim     = color.RGBA{0x8e, 0x8e, 0x9e, 0xff}
	green   = color.RGBA{0x73, 0xbf, 0x69, 0xff}
	palette = []color.RGBA{
		{0x73, 0xbf, 0x69, 0xff}, {0xf2, 0xcc, 0x0c, 0xff}, {0x57, 0x94, 0xf2, 0xff},
		{0xff, 0x98, 0x30, 0xff}, {0xf2, 0x49, 0x5c, 0xff}, {0xb8, 0x77, 0xd9, 0xff},
		{0x8a, 0xb8, 0xff, 0xff}, {0x96, 0xd9, 0x8d, 0xff}, {0xff, 0xb3, 0x57, 0xff},
		{0xca, 0x95, 0xe5, 0xff},
	}
)

// Render draws every panel of d with the data src returns for
// [start, end]. A panel type it cannot draw is an error.
func Render(ctx context.Context, d Dashboard, src Source, start, end time.Time) (*image.RGBA, error) {
	rows := 0
	for _, p := range d.Panels {
		rows = max(rows, p.GridPos.Y+p.GridPos.H)
	}
	img := image.NewRGBA(image.Rect(0, 0, 2*margin+24*colW, header+rows*unitH+margin))
	draw.Draw(img, img.Bounds(), image.NewUniform(bg), image.Point{}, draw.Src)
	label(img, margin, 24, d.Title, text, 2)
	label(img, img.Bounds().Dx()-margin-7*38, 22,
		start.UTC().Format("2006-01-02 15:04:05")+" to "+end.UTC().Format("15:04:05 UTC"), dim, 1)

	step := max(end.Sub(start)/200, time.Second).Round(time.Second)
	for _, p := range d.Panels {
		r := image.Rect(
			margin+p.GridPos.X*colW+gap/2, header+p.GridPos.Y*unitH+gap/2,
			margin+(p.GridPos.X+p.GridPos.W)*colW-gap/2, header+(p.GridPos.Y+p.GridPos.H)*unitH-gap/2)
		if p.Type == "row" {
			label(img, r.Min.X, r.Min.Y+20, p.Title, text, 1)
			fill(img, image.Rect(r.Min.X, r.Max.Y-1, r.Max.X, r.Max.Y), border)
			continue
		}
		var series []Series
		var names []string
		for _, t := range p.Targets {
			ss, err := src.QueryRange(ctx, t.Expr, start, end, step)
			if err != nil {
				return nil, fmt.Errorf("panel %q: %w", p.Title, err)
			}
			for _, s := range ss {
				series = append(series, s)
				names = append(names, Legend(t.LegendFormat, s.Labels))
			}
		}
		fill(img, r, border)
		fill(img, r.Inset(1), panelBg)
		label(img, r.Min.X+8, r.Min.Y+16, p.Title, text, 1)
		unit := p.FieldConfig.Defaults.Unit
		switch p.Type {
		case "stat":
			stat(img, r, series, unit)
		case "timeseries":
			timeseries(img, r, series, names, unit, start, end, step)
		default:
			return nil, fmt.Errorf("panel %q: dashshot cannot draw a %q panel", p.Title, p.Type)
		}
	}
	return img, nil
}

// stat draws the last value of the first series, large, over its
// sparkline.
func stat(img *image.RGBA, r image.Rectangle, series []Series, unit string) {
	if len(series) == 0 || last(series[0]) == nil {
		noData(img, r)
		return
	}
	s := series[0]
	spark := image.Rect(r.Min.X+8, r.Max.Y-r.Dy()/3, r.Max.X-8, r.Max.Y-8)
	lo, hi := bounds(series)
	plot(img, spark, s, s.Times[0], s.Times[len(s.Times)-1], lo, hi, time.Hour, color.RGBA{0x37, 0x5e, 0x33, 0xff})
	v := Format(*last(s), unit)
	const scale = 4
	w := len(v) * 7 * scale
	label(img, r.Min.X+(r.Dx()-w)/2, r.Min.Y+r.Dy()/2+10, v, green, scale)
}

func last(s Series) *float64 {
	for i := len(s.Values) - 1; i >= 0; i-- {
		if !math.IsNaN(s.Values[i]) {
			return &s.Values[i]
		}
	}
	return nil
}

// timeseries draws a line per series over [start, end], the y axis from
// zero (or the lowest value) to a round value over the highest, and the
// legend below.
func timeseries(img *image.RGBA, r image.Rectangle, series []Series, names []string, unit string, start, end time.Time, step time.Duration) {
	// The legend: entries flow left to right and wrap.
	type entry struct {
		x, y int
		name string
		c    color.RGBA
	}
	var legend []entry
	x, y := r.Min.X+10, 0
	for i, name := range names {
		w := 14 + 7*len(name) + 14
		if x+w > r.Max.X-8 && x > r.Min.X+10 {
			x, y = r.Min.X+10, y+15
		}
		legend = append(legend, entry{x, y, name, palette[i%len(palette)]})
		x += w
	}
	// Under the plot: the time labels' baseline 15 px down, the legend's
	// first 32 px down and 15 px a line, 6 px of margin.
	below := 22
	if len(legend) > 0 {
		below = 32 + y + 6
	}
	plotR := image.Rect(r.Min.X+62, r.Min.Y+30, r.Max.X-12, r.Max.Y-below)
	for _, e := range legend {
		ly := plotR.Max.Y + 32 + e.y
		fill(img, image.Rect(e.x, ly-8, e.x+10, ly-5), e.c)
		label(img, e.x+14, ly, e.name, text, 1)
	}
	if len(series) == 0 {
		noData(img, r)
		return
	}
	lo, hi := bounds(series)
	hi = nice(hi)
	for i := 0; i <= 4; i++ {
		v := lo + (hi-lo)*float64(i)/4
		gy := plotR.Max.Y - int(float64(plotR.Dy())*float64(i)/4)
		fill(img, image.Rect(plotR.Min.X, gy, plotR.Max.X, gy+1), border)
		s := Format(v, unit)
		label(img, plotR.Min.X-6-7*len(s), gy+4, s, dim, 1)
	}
	for i := 0; i <= 4; i++ {
		t := start.Add(time.Duration(float64(end.Sub(start)) * float64(i) / 4))
		gx := plotR.Min.X + int(float64(plotR.Dx())*float64(i)/4)
		s := t.UTC().Format("15:04:05")
		label(img, min(max(gx-7*len(s)/2, plotR.Min.X), plotR.Max.X-7*len(s)), plotR.Max.Y+15, s, dim, 1)
	}
	for i, s := range series {
		plot(img, plotR, s, start, end, lo, hi, step, palette[i%len(palette)])
	}
}

// bounds returns the range of every value (zero included).
func bounds(series []Series) (lo, hi float64) {
	for _, s := range series {
		for _, v := range s.Values {
			if !math.IsNaN(v) && !math.IsInf(v, 0) {
				lo, hi = min(lo, v), max(hi, v)
			}
		}
	}
	if hi <= lo {
		hi = lo + 1
	}
	return lo, hi
}

// nice rounds v up to 1, 2, 2.5 or 5 times a power of ten.
func nice(v float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return v
}

// plot draws s in r, two pixels wide, breaking the line where a step or
// more has no sample.
func plot(img *image.RGBA, r image.Rectangle, s Series, start, end time.Time, lo, hi float64, step time.Duration, c color.RGBA) {
	span := end.Sub(start).Seconds()
	if span <= 0 {
		span = 1
	}
	px := func(i int) (int, int, bool) {
		v := s.Values[i]
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return 0, 0, false
		}
		fx := float64(r.Dx()) * s.Times[i].Sub(start).Seconds() / span
		fy := float64(r.Dy()) * (v - lo) / (hi - lo)
		if fx < 0 || fx > float64(r.Dx()) || fy < 0 || fy > float64(r.Dy()) {
			return 0, 0, false // outside the range drawn
		}
		return r.Min.X + int(fx), r.Max.Y - int(fy), true
	}
	for i := 1; i < len(s.Values); i++ {
		x0, y0, ok0 := px(i - 1)
		x1, y1, ok1 := px(i)
		if !ok0 || !ok1 || s.Times[i].Sub(s.Times[i-1]) > 3*step/2 {
			continue
		}
		line(img, x0, y0, x1, y1, c)
		line(img, x0, y0-1, x1, y1-1, c)
	}
}

// line draws a one-pixel line (Bresenham).
func line(img *image.RGBA, x0, y0, x1, y1 int, c color.RGBA) {
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := sign(x1-x0), sign(y1-y0)
	e := dx + dy
	for {
		img.SetRGBA(x0, y0, c)
		if x0 == x1 && y0 == y1 {
			return
		}
		e2 := 2 * e
		if e2 >= dy {
			e += dy
			x0 += sx
		}
		if e2 <= dx {
			e += dx
			y0 += sy
		}
	}
}

func abs(v int) int { return max(v, -v) }

func sign(v int) int {
	switch {
	case v < 0:
		return -1
	case v > 0:
		return 1
	}
	return 0
}

func noData(img *image.RGBA, r image.Rectangle) {
	label(img, r.Min.X+(r.Dx()-7*7)/2, r.Min.Y+r.Dy()/2, "No data", dim, 1)
}

func fill(img *image.RGBA, r image.Rectangle, c color.RGBA) {
	draw.Draw(img, r, image.NewUniform(c), image.Point{}, draw.Src)
}

// label draws s with its baseline at (x, y), scaled up by scale.
func label(img *image.RGBA, x, y int, s string, c color.RGBA, scale int) {
	face := basicfont.Face7x13
	if scale == 1 {
		d := font.Drawer{Dst: img, Src: image.NewUniform(c), Face: face, Dot: fixed.P(x, y)}
		d.DrawString(s)
		return
	}
	small := image.NewRGBA(image.Rect(0, 0, 7*len(s), 13))
	d := font.Drawer{Dst: small, Src: image.NewUniform(c), Face: face, Dot: fixed.P(0, 10)}
	d.DrawString(s)
	dst := image.Rect(x, y-10*scale, x+small.Bounds().Dx()*scale, y+3*scale)
	xdraw.NearestNeighbor.Scale(img, dst, small, small.Bounds(), draw.Over, nil)
}

// Format writes v in a Grafana unit: percentunit, reqps, ops, s, short.
func Format(v float64, unit string) string {
	switch unit {
	case "percentunit":
		return compact(v*100) + "%"
	case "reqps":
		return compact(v) + " req/s"
	case "ops":
		return compact(v) + " ops/s"
	case "s":
		switch a := math.Abs(v); {
		case a == 0:
			return "0"
		case a < 1e-3:
			return compact(v*1e6) + " us" // the font has no µ
		case a < 1:
			return compact(v*1e3) + " ms"
		}
		return compact(v) + " s"
	}
	return compact(v)
}

// compact writes v with at most three significant digits, K or M for
// thousands and millions.
func compact(v float64) string {
	suffix := ""
	switch a := math.Abs(v); {
	case a >= 1e6:
		v, suffix = v/1e6, "M"
	case a >= 1e3:
		v, suffix = v/1e3, "K"
	}
	s := strconv.FormatFloat(v, 'g', 3, 64)
	if strings.ContainsAny(s, "e") {
		s = strconv.FormatFloat(v, 'f', 2, 64)
	}
	return s + suffix
}
