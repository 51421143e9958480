package fusednorm

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fusednorm/fusednorm/internal/ops"
)

// TestContractMatchesManifest keeps the Go contract and shaders/<op>/manifest.json in
// agreement: names, bind keys, dtypes, ranks, presence and attribute defaults.
func TestContractMatchesManifest(t *testing.T) {
	for _, c := range []*opContract{&embedContract, &addContract} {
		t.Run(c.Name, func(t *testing.T) {
			m, err := loadManifest(c)
			require.NoError(t, err)
			require.Equal(t, c.Domain, m.Domain)
			require.Equal(t, c.Name, m.Name)
			require.Equal(t, c.Version, m.SinceVersion)
			require.Len(t, m.Inputs, len(c.Inputs))
			for i, in := range m.Inputs {
				g := c.Inputs[i]
				require.Equal(t, g.BindKey, in.BindKey)
				require.Equal(t, g.Name, in.Name)
				require.Equal(t, g.Optional, in.Optional, in.BindKey)
				var dts []DType
				for _, s := range m.TypeConstraints[in.DType] {
					dts = append(dts, dtypeNamed(t, s))
				}
				require.ElementsMatch(t, g.DTypes, dts, in.BindKey)
				var rank any
				require.NoError(t, json.Unmarshal(in.Rank, &rank))
				switch r := rank.(type) {
				case float64:
					require.Equal(t, [2]int{g.MinRank, g.MaxRank}, [2]int{int(r), int(r)}, in.BindKey)
				case []any:
					require.Equal(t, [2]int{g.MinRank, g.MaxRank}, [2]int{int(r[0].(float64)), int(r[1].(float64))}, in.BindKey)
				default:
					t.Fatalf("%s: rank %v", in.BindKey, rank)
				}
			}
			require.Len(t, m.Outputs, len(c.Outputs))
			for i, o := range m.Outputs {
				require.Equal(t, c.Outputs[i].BindKey, o.BindKey)
				require.Equal(t, c.Outputs[i].Name, o.Name)
				require.Equal(t, c.Outputs[i].Optional, o.Optional)
			}
			for name, def := range c.Attributes {
				a, ok := m.Attributes[name]
				require.True(t, ok, "attribute %s missing from the manifest", name)
				switch d := def.(type) {
				case float64:
					require.Equal(t, float32(d), float32(a.Default.(float64)), name)
				case int64:
					require.Equal(t, float64(d), a.Default, name)
				default:
					require.Equal(t, d, a.Default, name)
				}
			}
			require.Len(t, m.Attributes, len(c.Attributes))
		})
	}
}

// TestDTypeCombinationsMatchManifest checks spec §B.2's table in Go against the manifest's.
func TestDTypeCombinationsMatchManifest(t *testing.T) {
	b, err := contractJSON(addContract.Folder)
	require.NoError(t, err)
	var m struct {
		Combos []struct{ X1, X2, Gamma, Bias, Out string } `json:"dtypeCombinations"`
	}
	require.NoError(t, json.Unmarshal(b, &m))
	require.Len(t, m.Combos, len(ops.AddDTypeRows))
	for i, r := range ops.AddDTypeRows {
		c := m.Combos[i]
		got := []DType{dtypeNamed(t, c.X1), dtypeNamed(t, c.X2), dtypeNamed(t, c.Gamma), dtypeNamed(t, c.Bias), dtypeNamed(t, c.Out)}
		require.True(t, slices.Equal(got, []DType{r[0], r[1], r[2], r[3], r[3]}), "row %d: %v", i, c)
	}
}

func dtypeNamed(t *testing.T, s string) DType {
	for _, d := range []DType{Float32, Float16, BFloat16, Int32} {
		if d.String() == s {
			return d
		}
	}
	t.Fatalf("dtype %q", s)
	return 0
}

func TestShapeOf(t *testing.T) {
	in := map[string][]int{"x1T": {2, 3, 4}, "gammaT": {3, 4}, "ids": {5, 7}}
	for _, c := range []struct {
		rule []string
		want []int
	}{
		{[]string{"shape(x1T)"}, []int{2, 3, 4}},
		{[]string{"leading(x1T,gammaT)", "ones(gammaT)"}, []int{2, 1, 1}},
		{[]string{"dim(ids,0)", "dim(ids,1)", "dim(gammaT,1)"}, []int{5, 7, 4}},
	} {
		got, err := shapeOf(c.rule, in)
		require.NoError(t, err)
		require.Equal(t, c.want, got)
	}
	for _, bad := range [][]string{{"dim(ids,2)"}, {"dim(absent,0)"}, {"nope(ids)"}, {"shape"}} {
		_, err := shapeOf(bad, in)
		require.Error(t, err, bad)
	}
}
