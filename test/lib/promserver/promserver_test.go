package promserver

import (
	"encoding/json"
	"slices"
	"testing"
)

// A tree as parse_query returns it for
// sum(rate(a_total[5m])) / on() {__name__="b", job="x"} + c{__name__=~"d.*"},
// trimmed to the fields selectors reads.
const tree = `{"type": "binaryExpr", "op": "+",
 "lhs": {"type": "binaryExpr", "op": "/",
  "lhs": {"type": "aggregation", "op": "sum", "expr": {"type": "call", "func": {"name": "rate"},
   "args": [{"type": "matrixSelector", "name": "a_total", "matchers": [{"name": "__name__", "type": "=", "value": "a_total"}]}]}},
  "rhs": {"type": "vectorSelector", "name": "", "matchers": [{"name": "__name__", "type": "=", "value": "b"}, {"name": "job", "type": "=", "value": "x"}]}},
 "rhs": {"type": "vectorSelector", "name": "c", "matchers": [{"name": "__name__", "type": "=~", "value": "d.*"}]}}`

func TestSelectorsNameEveryMetricRead(t *testing.T) {
	t.Parallel()
	var node any
	if err := json.Unmarshal([]byte(tree), &node); err != nil {
		t.Fatal(err)
	}
	var names []string
	selectors(node, &names)
	slices.Sort(names)
	if want := []string{"a_total", "b", "c"}; !slices.Equal(names, want) {
		t.Errorf("selectors = %q, want %q", names, want)
	}
}

func TestRuleFileIsTheGroupsOfAPrometheusRule(t *testing.T) {
	t.Parallel()
	got, err := RuleFile([]byte("---\n# Source: x\napiVersion: monitoring.coreos.com/v1\nkind: PrometheusRule\nmetadata: {name: r}\nspec:\n  groups:\n  - name: g\n    rules:\n    - alert: A\n      expr: up == 0\n"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "groups:\n- name: g\n  rules:\n  - alert: A\n    expr: up == 0\n"; string(got) != want {
		t.Errorf("RuleFile:\n%s\nwant:\n%s", got, want)
	}
	if _, err := RuleFile([]byte("kind: ConfigMap\n")); err == nil {
		t.Error("a ConfigMap taken for a PrometheusRule")
	}
}
