package bench

import (
	"errors"
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// ErrBadPlot is returned when a sweep cannot be drawn: no numeric knob to
// put on the x axis, or a file name without a known image extension.
var ErrBadPlot = errors.New("bench: cannot plot")

// plotX picks the x axis of the plot: clients when swept, otherwise the
// first swept knob whose values are all numbers (commit_delay, say). values
// returns axis i's values.
func plotX(names []string, values func(i int) []string) (int, error) {
	for i, n := range names {
		if n == "clients" {
			return i, nil
		}
	}
next:
	for i := range names {
		for _, v := range values(i) {
			if _, err := strconv.ParseFloat(v, 64); err != nil {
				continue next
			}
		}
		return i, nil
	}
	return 0, fmt.Errorf("%w: --plot needs a numeric sweep such as clients=1,2,4", ErrBadPlot)
}

// CheckPlotFile returns an error wrapping ErrBadPlot unless file ends in an
// image extension WritePlot can write (.png, .svg, also .pdf, .eps, .jpg,
// .tif).
func CheckPlotFile(file string) error {
	switch strings.ToLower(filepath.Ext(file)) {
	case ".png", ".svg", ".pdf", ".eps", ".jpg", ".jpeg", ".tif", ".tiff":
	default:
		return fmt.Errorf("%w: %q: want a .png or .svg file", ErrBadPlot, file)
	}
	// Checked before a sweep runs, not after it: a directory that is not
	// there would otherwise cost the whole sweep's results.
	if fi, err := os.Stat(filepath.Dir(file)); err != nil {
		return fmt.Errorf("%w: %q: %v", ErrBadPlot, file, err)
	} else if !fi.IsDir() {
		return fmt.Errorf("%w: %q: %s is not a directory", ErrBadPlot, file, filepath.Dir(file))
	}
	return nil
}

// WritePlot draws t's tps (mean, with ± one standard deviation bars when
// cells ran more than once) against clients, or against the first numeric
// knob when clients was not swept, one line per combination of the other
// knobs, plus the optimum clients x sync rate when there is a disk model.
// The format follows file's extension (see CheckPlotFile). Errors: one
// wrapping ErrBadPlot for a file CheckPlotFile refuses, a sweep with no
// numeric knob to put on the x axis, or one with no finished run to draw;
// the error of drawing or saving the image.
func WritePlot(file string, t *SweepTable) error {
	if err := CheckPlotFile(file); err != nil {
		return err
	}
	x, err := plotX(t.Axes, func(i int) []string {
		vs := make([]string, len(t.Rows))
		for j, r := range t.Rows {
			vs[j] = r.Values[i]
		}
		return vs
	})
	if err != nil {
		return err
	}
	type series struct {
		name string
		xys  plotter.XYs
		errs plotter.YErrors
	}
	var all []*series
	byName := map[string]*series{}
	// Rows with the same optimum per client share one optimum line.
	var optimum plotter.XYs
	rates := map[float64]bool{}
	seenClients := map[int]bool{}
	bars := false
	for _, r := range t.Rows {
		if len(r.Runs) == 0 {
			continue
		}
		var parts []string
		for i, n := range t.Axes {
			if i != x && r.Values[i] != "" {
				parts = append(parts, n+"="+r.Values[i])
			}
		}
		name := strings.Join(parts, ", ")
		if name == "" {
			name = "tps"
		}
		s := byName[name]
		if s == nil {
			s = &series{name: name}
			byName[name] = s
			all = append(all, s)
		}
		xv, _ := strconv.ParseFloat(r.Values[x], 64)
		mean, sd := r.TPS()
		s.xys = append(s.xys, plotter.XY{X: xv, Y: mean})
		s.errs = append(s.errs, struct{ Low, High float64 }{sd, sd})
		bars = bars || len(r.Runs) > 1
		if t.Axes[x] == "clients" && r.Calc > 0 {
			rates[r.Calc/float64(r.Clients)] = true
			if !seenClients[r.Clients] {
				seenClients[r.Clients] = true
				optimum = append(optimum, plotter.XY{X: float64(r.Clients), Y: r.Calc})
			}
		}
	}
	if len(all) == 0 {
		return fmt.Errorf("%w: no finished runs", ErrBadPlot)
	}

	p := plot.New()
	p.Title.Text = t.Title
	p.X.Label.Text = t.Axes[x]
	p.Y.Label.Text = "tps"
	p.Y.Min = 0
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())
	var lines []any
	for _, s := range all {
		lines = append(lines, s.name, s.xys)
	}
	if err := plotutil.AddLinePoints(p, lines...); err != nil {
		return fmt.Errorf("bench: plot: %w", err)
	}
	if bars {
		for _, s := range all {
			eb, err := plotter.NewYErrorBars(struct {
				plotter.XYs
				plotter.YErrors
			}{s.xys, s.errs})
			if err != nil {
				return fmt.Errorf("bench: plot: %w", err)
			}
			p.Add(eb)
		}
	}
	if len(optimum) > 0 && len(rates) == 1 {
		l, err := plotter.NewLine(optimum)
		if err != nil {
			return fmt.Errorf("bench: plot: %w", err)
		}
		l.Color = color.Gray{Y: 96}
		l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		l.Width = vg.Points(1)
		p.Add(l)
		for r := range rates {
			p.Legend.Add(fmt.Sprintf("optimum: clients x %g syncs/s", r), l)
		}
	}
	p.Legend.ThumbnailWidth = 0.4 * vg.Inch
	if err := p.Save(8*vg.Inch, 5*vg.Inch, file); err != nil {
		return fmt.Errorf("bench: write plot %s: %w", file, err)
	}
	return nil
}
