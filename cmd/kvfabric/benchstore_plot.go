package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"image/color"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// readStoreReport reads a --json file of bench --store.
func readStoreReport(jsonFile string) (storeReport, error) {
	var rep storeReport
	raw, err := os.ReadFile(jsonFile)
	if err != nil {
		return rep, err
	}
	if err := json.Unmarshal(raw, &rep); err != nil {
		return rep, fmt.Errorf("%s: %w", jsonFile, err)
	}
	if rep.Kind != "kvfabric-bench-store" {
		return rep, fmt.Errorf("%s: kind %q is not a bench --store report", jsonFile, rep.Kind)
	}
	return rep, nil
}

// replotStore draws plotFile from the JSON report of an earlier run.
func replotStore(w io.Writer, jsonFile, plotFile string) error {
	rep, err := readStoreReport(jsonFile)
	if err != nil {
		return fmt.Errorf("--replot: %w", err)
	}
	if err := plotStore(plotFile, rep); err != nil {
		return fmt.Errorf("--plot: %w", err)
	}
	fmt.Fprintf(w, "wrote %s\n", plotFile)
	return nil
}

// plotStore draws the ratio to the copy-engine ceiling against the object
// size (log scale): one line per path and direction for the first GPU
// alone (solid), and for the multi-GPU mode's aggregate (dashed). The
// file's extension picks the format (.svg or .png).
func plotStore(file string, rep storeReport) error {
	switch ext := strings.ToLower(filepath.Ext(file)); ext {
	case ".svg", ".png":
	default:
		return fmt.Errorf("%s: want a .svg or .png file", file)
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("kvfabric Store put/get vs copy-engine ceiling (%s)", rep.Driver)
	p.Title.Padding = vg.Points(8)
	p.X.Label.Text = "object size"
	p.Y.Label.Text = "GB/s ÷ ceiling GB/s (same run)"
	p.X.Scale = plot.LogScale{}
	var ticks []plot.Tick
	for _, s := range rep.Sizes {
		ticks = append(ticks, plot.Tick{Value: float64(s), Label: sizeLabel(s)})
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	if len(rep.Sizes) > 0 { // a log scale needs a positive range, results or not
		p.X.Min, p.X.Max = float64(slices.Min(rep.Sizes))/1.3, float64(slices.Max(rep.Sizes))*1.3
	}
	p.Y.Min, p.Y.Max = 0, 1.1
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())

	type key struct{ mode, path, dir string }
	lines := map[key]plotter.XYs{}
	var order []key
	var modes []string
	for _, r := range rep.Results {
		// The first GPU alone, and the aggregate of several.
		if (r.Mode == "1gpu") != (r.GPU >= 0) || r.Size == 0 {
			continue
		}
		k := key{r.Mode, r.Path, r.Dir}
		if _, ok := lines[k]; !ok {
			order = append(order, k)
		}
		if !slices.Contains(modes, r.Mode) {
			modes = append(modes, r.Mode)
		}
		lines[k] = append(lines[k], plotter.XY{X: float64(r.Size), Y: r.Ratio})
		p.Y.Max = max(p.Y.Max, r.Ratio*1.1)
	}
	if len(order) == 0 {
		p.Title.Text += ": no results"
	}
	var series []string // path+dir, for a stable colour per series
	for _, k := range order {
		if s := k.path + " " + k.dir; !slices.Contains(series, s) {
			series = append(series, s)
		}
	}
	for _, k := range order {
		l, pts, err := plotter.NewLinePoints(lines[k])
		if err != nil {
			return err
		}
		i := slices.Index(series, k.path+" "+k.dir)
		c := plotutil.Color(i)
		l.Color, pts.Color = c, c
		l.Width = vg.Points(1.5)
		pts.Shape = plotutil.Shape(i)
		name := k.path + " " + k.dir
		if k.mode != "1gpu" {
			l.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}
			name += fmt.Sprintf(" (%s, aggregate)", k.mode)
		}
		p.Add(l, pts)
		p.Legend.Add(name, l, pts)
	}
	// The ceiling itself.
	one := plotter.NewFunction(func(float64) float64 { return 1 })
	one.Color = color.Gray{Y: 120}
	one.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
	p.Add(one)
	return savePlot(p, file)
}

// savePlot writes p as SVG or PNG. (plot.Save would link every vg backend
// — PDF, EPS, LaTeX — into the binary, which the device folder cannot
// spare.)
func savePlot(p *plot.Plot, file string) (err error) {
	const w, h = 11 * vg.Inch, 7 * vg.Inch
	var wt io.WriterTo
	switch strings.ToLower(filepath.Ext(file)) {
	case ".svg":
		c := vgsvg.New(w, h)
		p.Draw(draw.New(c))
		wt = c
	case ".png":
		c := vgimg.New(w, h)
		p.Draw(draw.New(c))
		wt = vgimg.PngCanvas{Canvas: c}
	default:
		return fmt.Errorf("%s: want a .svg or .png file", file)
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, f.Close()) }()
	_, err = wt.WriteTo(f)
	return err
}
