#!/usr/bin/env python3
"""metric_names.py: the names it reads out of PromQL, Grafana queries and sources."""
import json
import pathlib
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import metric_names as mn  # noqa: E402

SCRIPT = pathlib.Path(__file__).parent / "metric_names.py"


class NamesInExpr(unittest.TestCase):
    def test_functions_grouping_and_matchers_are_not_names(self):
        expr = ('sum by (gate, le) (rate(dripgate_a_total{result="refused", gate=~"x|y"}[5m]))'
                ' / ignoring (gate) group_left sum without (port) (rate(b:rule[1m] offset 5m))'
                ' > bool 0.2 and on (instance) c unless d or e')
        self.assertEqual(mn.names_in_expr(expr), {"dripgate_a_total", "b:rule", "c", "d", "e"})

    def test_histogram_series_keep_their_suffix_until_based(self):
        expr = ('histogram_quantile(0.99, sum by (le) (rate(x_seconds_bucket[$__rate_interval])))'
                ' / rate(x_seconds_sum[5m]) / rate(x_seconds_count[5m])')
        names = mn.names_in_expr(expr)
        self.assertEqual(names, {"x_seconds_bucket", "x_seconds_sum", "x_seconds_count"})
        self.assertEqual({mn.base_name(n) for n in names}, {"x_seconds"})

    def test_strings_numbers_durations_and_grafana_variables(self):
        expr = ('label_replace(topk(10, q{iface=~"$iface"}), "dst", "$1", "src", "(.*)")'
                ' * 1e3 + 0x1f - vector(2) [1h:5m] + ${var} + [[old]] + NaN + Inf')
        self.assertEqual(mn.names_in_expr(expr), {"q"})

    def test_a_name_given_by_a_matcher(self):
        self.assertEqual(mn.names_in_expr('{__name__="only_here", job="x"}'), {"only_here"})

    def test_grafana_query_variables(self):
        self.assertEqual(mn.names_in_grafana_query('label_values(m_total{a="1,2"}, iface)'),
                         {"m_total"})
        self.assertEqual(mn.names_in_grafana_query("label_values(iface)"), set())
        self.assertEqual(mn.names_in_grafana_query("query_result(topk(3, g))"), {"g"})


class Files(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.root = pathlib.Path(self.dir.name)

    def tearDown(self):
        self.dir.cleanup()

    def write(self, rel, text):
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    def run_cli(self, *args):
        return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)],
                              capture_output=True, text=True)

    def test_used_reads_rules_and_dashboards(self):
        rules = self.write("r.yml", "groups:\n- name: g\n  rules:\n"
                           "  - alert: A\n    expr: rate(a_total[5m]) > 0\n"
                           "  - record: job:b:sum\n    expr: sum by (job) (b_bucket)\n")
        dash = self.write("d.json", json.dumps({
            "panels": [{"type": "row", "panels": [{"targets": [{"expr": "c / d_count"}]}]}],
            "templating": {"list": [
                {"type": "query", "name": "v", "query": {"query": "label_values(e, class)"}},
                {"type": "datasource", "name": "DS", "query": "prometheus"}]}}))
        out = self.run_cli("used", rules, dash)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout.split(), ["a_total", "b", "c", "d", "e"])

    def test_declared_reads_sources_but_not_tests(self):
        self.write("control/m.cc", 'f("dripgate_x_total", "help"); g("dripgate_h_seconds");')
        self.write("dataplane/s.h", 'const char* k = "dripgate_dp_bucket";')
        self.write("control/m_test.cc", 'EXPECT("dripgate_only_in_a_test");')
        self.write("tests/t.cc", '"dripgate_only_in_tests"')
        self.write("tools/x.py", '"dripgate_in_python"')
        self.assertEqual(mn.declared(self.root), {"dripgate_x_total", "dripgate_h_seconds",
                                                  "dripgate_dp"})

    def test_declared_joins_a_prefix_with_the_literals_of_its_file(self):
        self.write("dataplane/r.cc", 'const char* kPrefix = "dripgate_dp_";\n'
                   'w(name("drops_total"), {{"cause", "depth"}}); w(name("lateness_seconds_bucket"));')
        self.write("dataplane/other.cc", 'w(name("elsewhere_total"));')
        names = mn.declared(self.root)
        self.assertIn("dripgate_dp_drops_total", names)
        self.assertIn("dripgate_dp_lateness_seconds", names)
        self.assertNotIn("dripgate_dp_", names)
        self.assertNotIn("dripgate_dp_elsewhere_total", names)

    def test_check_names_each_missing_name_and_where(self):
        self.write("control/m.cc", '"dripgate_x_total" "dripgate_h_seconds"')
        rules = self.write("r.yml", "groups:\n- name: g\n  rules:\n"
                           "  - alert: Known\n    expr: rate(dripgate_x_total[5m]) > 0\n"
                           "  - alert: Hist\n    expr: rate(dripgate_h_seconds_bucket[5m]) > 0\n"
                           "  - alert: Unknown\n    expr: dripgate_y > 1\n"
                           "  - alert: Empty\n    expr: vector(1)\n")
        out = self.run_cli("check", self.root, rules)
        self.assertEqual(out.returncode, 1)
        self.assertIn("Unknown: dripgate_y: no source", out.stderr)
        self.assertIn("Empty: no metric in 'vector(1)'", out.stderr)
        self.assertNotIn("Known", out.stderr)
        self.assertNotIn("Hist", out.stderr)
        self.assertEqual(out.stderr.splitlines()[-1], "1 names no source declares: dripgate_y")
        self.assertEqual(len(out.stderr.splitlines()), 3)

    def test_check_passes_when_every_name_is_declared_or_allowed(self):
        self.write("control/m.cc", '"dripgate_x_total"')
        rules = self.write("r.yml", "groups:\n- name: g\n  rules:\n"
                           "  - alert: A\n    expr: dripgate_x_total + dripgate_y\n")
        self.assertEqual(self.run_cli("check", self.root, rules).returncode, 1)
        out = self.run_cli("check", self.root, rules, "--allow", "dripgate_y")
        self.assertEqual(out.returncode, 0, out.stderr)


if __name__ == "__main__":
    unittest.main()
