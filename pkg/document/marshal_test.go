package document

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	sigsyaml "sigs.k8s.io/yaml"
)

// marshalOrderedBefore is marshalOrdered as it was: each top-level field in
// turn through sigs.k8s.io/yaml. Documents already in Git were written so;
// the same object must keep giving the same bytes, or an upgrade would
// rewrite every document.
func marshalOrderedBefore(o map[string]any) ([]byte, error) {
	var buf bytes.Buffer
	keys := []string{"apiVersion", "kind", "metadata"}
	var rest []string
	for k := range o {
		if !slices.Contains(keys, k) {
			rest = append(rest, k)
		}
	}
	slices.Sort(rest)
	for _, k := range append(keys, rest...) {
		v, ok := o[k]
		if !ok {
			continue
		}
		b, err := sigsyaml.Marshal(map[string]any{k: v})
		if err != nil {
			return nil, err
		}
		buf.Write(b)
	}
	return buf.Bytes(), nil
}

// tricky are strings YAML treats specially: booleans and numbers of YAML
// 1.1, nulls, indicators, quotes, line breaks, long lines, unicode.
var tricky = []string{
	"", " ", "yes", "no", "on", "off", "y", "n", "true", "False", "null", "~", "NULL", "1", "-1", "0x1F", "0o17", "017", "1e3",
	"1.5", ".5", "+1", ".inf", "-.Inf", ".nan", "2026-12-01", "2026-12-01T10:00:00Z", "12:30", "1_000", "- item", "key: value",
	"#comment", "a #b", "&anchor", "*alias", "!tag", "%percent", "@at", "`tick", "'single'", `"double"`, "{a: 1}", "[1, 2]",
	"line1\nline2", "line1\nline2\n", "trailing space ", " leading", "tab\there", "back\\slash", "ünïcödé ✓", "日本語",
	strings.Repeat("long words that wrap ", 10), strings.Repeat("x", 200), "a: b\nc: d", "<html>&amp;</html>", "\x7f",
	"emoji 🙂", "-", "?", ":", ",", "|", ">", "=", "0", "00", "1.0", "-0", "1,000",
}

func randomValue(r *rand.Rand, depth int) any {
	switch n := r.IntN(10); {
	case n < 3 || depth > 3:
		return tricky[r.IntN(len(tricky))]
	case n == 3:
		return []int64{0, 1, -7, 42, math.MaxInt32 + 1, math.MaxInt64, math.MinInt64}[r.IntN(7)]
	case n == 4:
		return []float64{0.5, -2.25, 1e-7, 3.0, 1e19, 1e21, 12345678.9, math.MaxInt64, 1 << 53}[r.IntN(9)]
	case n == 5:
		return r.IntN(2) == 0
	case n == 6:
		return nil
	case n == 7:
		l := make([]any, r.IntN(4))
		for i := range l {
			l[i] = randomValue(r, depth+1)
		}
		return l
	default:
		m := map[string]any{}
		for range r.IntN(5) {
			m[tricky[r.IntN(len(tricky))]+fmt.Sprint(r.IntN(12))] = randomValue(r, depth+1)
		}
		return m
	}
}

// TestMarshalOrderedAsBefore: documents are byte for byte what the former
// encoding wrote, for objects as the API server sends them (decoded from
// JSON) and for random values full of what YAML treats specially.
func TestMarshalOrderedAsBefore(t *testing.T) {
	r := rand.New(rand.NewPCG(16, 2026))
	for i := range 3000 {
		o := map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": fmt.Sprintf("cm-%d", i), "namespace": "demo", "labels": randomValue(r, 2)}}
		for range r.IntN(4) {
			o[tricky[r.IntN(len(tricky))]] = randomValue(r, 0)
		}
		// As the API server's JSON decodes: numbers int64 or float64.
		raw, err := json.Marshal(o)
		require.NoError(t, err)
		var decoded map[string]any
		d := json.NewDecoder(bytes.NewReader(raw))
		d.UseNumber()
		require.NoError(t, d.Decode(&decoded))
		decoded = numbers(decoded).(map[string]any)
		for _, obj := range []map[string]any{o, decoded} {
			got, err := marshalOrdered(obj)
			require.NoError(t, err)
			if !ordered(obj) {
				// Keys the encoder cannot order: the former bytes depended
				// on the map's order; now they never do.
				again, err := marshalOrdered(obj)
				require.NoError(t, err)
				require.Equal(t, string(got), string(again))
				continue
			}
			want, wantErr := marshalOrderedBefore(obj)
			if wantErr != nil {
				// Control characters: the round trip refused them, and
				// the object was never written; now it is, readably.
				var back map[string]any
				require.NoError(t, sigsyaml.Unmarshal(got, &back), "object %d: %s", i, got)
				continue
			}
			require.Equal(t, string(want), string(got), "object %d: %s", i, raw)
		}
	}
}

// numbers turns json.Numbers into int64 where they are integers, else
// float64, as unstructured decoding does.
func numbers(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			v[k] = numbers(e)
		}
	case []any:
		for i, e := range v {
			v[i] = numbers(e)
		}
	case json.Number:
		if i, err := v.Int64(); err == nil {
			return i
		}
		f, _ := v.Float64()
		return f
	}
	return v
}

// ordered says whether the encoder's key order is a strict weak order on
// every map in v, so that sorting gives one result whatever the input order.
func ordered(v any) bool {
	switch v := v.(type) {
	case map[string]any:
		var keys []string
		for k, e := range v {
			if !ordered(e) {
				return false
			}
			keys = append(keys, k)
		}
		for _, a := range keys {
			for _, b := range keys {
				if yamlKeyLess(a, b) && yamlKeyLess(b, a) {
					return false
				}
				for _, c := range keys {
					less, incomparable := func(x, y string) bool { return yamlKeyLess(x, y) },
						func(x, y string) bool { return !yamlKeyLess(x, y) && !yamlKeyLess(y, x) }
					if less(a, b) && less(b, c) && !less(a, c) || incomparable(a, b) && incomparable(b, c) && !incomparable(a, c) {
						return false
					}
				}
			}
		}
	case []any:
		for _, e := range v {
			if !ordered(e) {
				return false
			}
		}
	}
	return true
}

// TestKeysTheEncoderCannotOrderGiveOneDocument: "1" < "02" < "0o17" < "1"
// in the YAML encoder's order, which sorted them as the map happened to be
// walked: the same ConfigMap gave different documents, hence commits that
// changed nothing.
func TestKeysTheEncoderCannotOrderGiveOneDocument(t *testing.T) {
	first, err := marshalOrdered(map[string]any{"data": map[string]any{"1": "a", "02": "b", "0o17": "c", "x": "d"}})
	require.NoError(t, err)
	for range 200 {
		// A new map each time, walked in a new order.
		got, err := marshalOrdered(map[string]any{"data": map[string]any{"0o17": "c", "x": "d", "1": "a", "02": "b"}})
		require.NoError(t, err)
		require.Equal(t, string(first), string(got))
	}
}
