package main

import (
	"errors"
	"image/color"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/fusednorm/fusednorm"
)

// writePlot draws, per measured case, the effective GB/s beside the probe's copy GB/s over
// the same bytes: how far each case is from what the memory system gives.
func writePlot(path string, info fusednorm.Info, results []*result) error {
	var names []string
	var ours, probe plotter.Values
	for _, r := range results {
		if r.Runs == 0 {
			continue
		}
		names = append(names, r.Case)
		ours = append(ours, r.GBps)
		if r.Probe != nil {
			probe = append(probe, r.Probe.Best())
		} else {
			probe = append(probe, 0)
		}
	}
	if len(names) == 0 {
		return errors.New("-plot: no case was measured")
	}
	p := plot.New()
	p.Title.Text = "fusednorm " + info.Backend + ": effective GB/s vs memory probe"
	p.Y.Label.Text = "GB/s (1e9 B/s)"
	p.X.Tick.Label.Rotation = math.Pi / 6
	p.X.Tick.Label.XAlign = draw.XRight
	p.X.Tick.Label.YAlign = draw.YTop
	w := vg.Points(14)
	a, err := plotter.NewBarChart(ours, w)
	if err != nil {
		return err
	}
	a.Color = color.RGBA{R: 31, G: 119, B: 180, A: 255}
	a.Offset = -w / 2
	b, err := plotter.NewBarChart(probe, w)
	if err != nil {
		return err
	}
	b.Color = color.RGBA{R: 190, G: 190, B: 190, A: 255}
	b.Offset = w / 2
	p.Add(a, b)
	p.Legend.Add(info.Backend, a)
	p.Legend.Add("probe (best copy)", b)
	p.Legend.Top = true
	p.NominalX(names...)
	width := vg.Length(max(6, len(names))) * vg.Centimeter * 1.6
	return p.Save(width, 12*vg.Centimeter, path)
}
