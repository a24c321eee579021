"""Unit tests of the abuse suite's pure logic (tests/abuse/abuse.py): no
server, no binaries, no network. Run with

    python3 -m unittest discover -s tests/abuse -v
"""
import base64
import hashlib
import hmac
import json
import os
import struct
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import abuse  # noqa: E402


def w(loss, p99, active=12):
    return {"loss": loss, "p99": p99, "active": active, "seconds": 3}


class Durations(unittest.TestCase):
    def test_units(self):
        self.assertEqual(abuse.secs("5s", None), 5.0)
        self.assertEqual(abuse.secs("250ms", None), 0.25)
        self.assertEqual(abuse.secs("2m", None), 120.0)
        self.assertEqual(abuse.secs("1h", None), 3600.0)
        self.assertEqual(abuse.secs("1.5s", None), 1.5)

    def test_bare_number_is_seconds_and_spaces_are_allowed(self):
        self.assertEqual(abuse.secs("7", None), 7.0)
        self.assertEqual(abuse.secs(" 10 s ", None), 10.0)

    def test_anything_else_is_the_default(self):
        for bad in ("", None, "soon", "5 sec", "-1s", "5x", "1e3"):
            self.assertEqual(abuse.secs(bad, 42.0), 42.0, bad)


HELP = """Usage: corelay [OPTIONS]

Options:
      --http <HTTP>
          HTTP API address
          [env: CORELAY_HTTP=]
          [default: 0.0.0.0:7070]

      --http-header-timeout <HTTP_HEADER_TIMEOUT>
          Slow clients; see also --http-write-timeout
          [default: 10s]

      --http-write-timeout <HTTP_WRITE_TIMEOUT>
          A client that takes no response bytes for this long is closed
          [default: 12s]

      --ice-tcp-max-conns-per-ip <N>
          [default: 32]

      --no-ice-tcp
          Do not listen on TCP

  -h, --help
          Print help
"""


class HelpText(unittest.TestCase):
    def test_has_flag(self):
        self.assertTrue(abuse.has_flag(HELP, "--http-write-timeout"))
        self.assertTrue(abuse.has_flag(HELP, "--no-ice-tcp"))
        self.assertFalse(abuse.has_flag(HELP, "--auth-secret"))
        # A prefix of a flag is not the flag.
        self.assertFalse(abuse.has_flag(HELP, "--http-write"))

    def test_flag_default_reads_the_flags_own_paragraph(self):
        self.assertEqual(abuse.flag_default(HELP, "--http"), "0.0.0.0:7070")
        self.assertEqual(abuse.flag_default(HELP, "--http-header-timeout"), "10s")
        # Mentioned in another flag's text first: still its own default.
        self.assertEqual(abuse.flag_default(HELP, "--http-write-timeout"), "12s")
        self.assertEqual(abuse.flag_default(HELP, "--ice-tcp-max-conns-per-ip"), "32")

    def test_flag_without_default_or_absent(self):
        self.assertIsNone(abuse.flag_default(HELP, "--no-ice-tcp"))
        self.assertIsNone(abuse.flag_default(HELP, "--auth-secret"))

    def test_int_or(self):
        self.assertEqual(abuse.int_or("64", 1), 64)
        self.assertEqual(abuse.int_or(None, 1), 1)
        self.assertEqual(abuse.int_or("x", 1), 1)


class OnlyFilter(unittest.TestCase):
    def test_parse(self):
        self.assertEqual(abuse.only_filter(""), [])
        self.assertEqual(abuse.only_filter(None), [])
        self.assertEqual(abuse.only_filter("garbage, pins,,"), ["garbage", "pins"])

    def test_substring_match(self):
        self.assertTrue(abuse.selected("garbage-14000", []))
        self.assertTrue(abuse.selected("garbage-14000", ["garbage"]))
        self.assertTrue(abuse.selected("srtcp-garbage", ["garbage"]))
        self.assertFalse(abuse.selected("pin-flood-20000", ["garbage"]))
        self.assertTrue(abuse.selected("sigterm-partial-header", ["x", "sigterm"]))

    def test_every_row_name_is_unique_and_costed(self):
        names = [n for n, _ in abuse.ROWS]
        self.assertEqual(len(names), len(set(names)))
        for n in ("stun-attribute-bombs", "channels-200x60KB", "ice-tcp-unauthenticated",
                  "http-never-read", "one-token-100-joins", "dc-messages-200KB",
                  "srtcp-garbage"):
            self.assertIn(n, names)
            self.assertGreater(abuse.row_cost(n), 1.5, n)

    def test_call_outlasts_the_rows(self):
        names = ["slow-headers", "garbage-14000", "unknown-row"]
        want = sum(abuse.row_cost(n) + 3 for n in names) + 30
        self.assertEqual(abuse.call_seconds(names, 3), want)


class Verdict(unittest.TestCase):
    def test_quiet_call_is_not_hurt(self):
        self.assertEqual(abuse.hurt(w(0.0, 5.0), w(0.01, 14.0), 0.02, 3, 100), [])

    def test_p99_must_exceed_both_the_factor_and_the_absolute_margin(self):
        # 3x but under +100 ms: a noisy neighbour, not hurt.
        self.assertEqual(abuse.hurt(w(0, 5.0), w(0, 90.0), 0.02, 3, 100), [])
        # +100 ms but under 3x.
        self.assertEqual(abuse.hurt(w(0, 80.0), w(0, 200.0), 0.02, 3, 100), [])
        # Both.
        self.assertEqual(abuse.hurt(w(0, 5.0), w(0, 120.0), 0.02, 3, 100),
                         ["legit P99 120.0 ms"])

    def test_loss_beyond_the_tolerance(self):
        self.assertEqual(abuse.hurt(w(0.01, 5), w(0.03, 5), 0.02, 3, 100), [])
        self.assertEqual(abuse.hurt(w(0.01, 5), w(0.04, 5), 0.02, 3, 100), ["legit loss 4.0%"])
        # No quiet loss figure counts as zero; no attack loss figure is no judgement.
        self.assertEqual(abuse.hurt(w(None, 5), w(0.03, 5), 0.02, 3, 100), ["legit loss 3.0%"])
        self.assertEqual(abuse.hurt(w(0.0, 5), w(None, 5), 0.02, 3, 100), [])

    def test_a_participant_that_dropped(self):
        self.assertEqual(abuse.hurt(w(0, 5), w(0, 5, active=11), 0.02, 3, 100),
                         ["legit participants 11/12"])

    def test_everything_at_once(self):
        self.assertEqual(len(abuse.hurt(w(0, 5), w(0.5, 500, active=3), 0.02, 3, 100)), 3)

    def test_defaults_come_from_the_configuration(self):
        self.assertEqual(abuse.hurt(w(0, 5.0), w(0, 120.0)), ["legit P99 120.0 ms"])

    def row(self, **kw):
        r = {"attack": "x", "ok": True, "why": "", "up": True, "upwhy": "", "needs_call": True}
        r.update(kw)
        return r

    def test_judge_pass(self):
        self.assertEqual(abuse.judge(self.row(why="fine"), w(0, 5), w(0, 6)), (True, "fine"))

    def test_judge_own_check_failed(self):
        ok, why = abuse.judge(self.row(ok=False, why="expected 413"), w(0, 5), w(0, 6))
        self.assertFalse(ok)
        self.assertEqual(why, "expected 413")

    def test_judge_down_comes_first(self):
        ok, why = abuse.judge(self.row(up=False, upwhy="server exited (status -9)", why="x"),
                              w(0, 5), w(0, 6))
        self.assertFalse(ok)
        self.assertTrue(why.startswith("DOWN: server exited"), why)

    def test_judge_sigterm_may_take_the_server_down(self):
        ok, _ = abuse.judge(self.row(attack="sigterm-partial-header", up=False, needs_call=False),
                            None, None)
        self.assertTrue(ok)

    def test_judge_hurt_call(self):
        ok, why = abuse.judge(self.row(), w(0, 5), w(0.2, 5))
        self.assertFalse(ok)
        self.assertIn("legit call hurt: legit loss 20.0%", why)

    def test_judge_without_call_data(self):
        ok, why = abuse.judge(self.row(), None, w(0, 5))
        self.assertTrue(ok)
        self.assertEqual(why, "no legit-call data for this window")
        self.assertEqual(abuse.judge(self.row(needs_call=False), None, None), (True, ""))


CSV = """second,tx_pps,rx_video_pps,e2e_p99_ms,active
0,100,300,5.0,12
1,100,290,6.5,12
2,100,270,40.0,11
3,100,,,12
"""


class Windows(unittest.TestCase):
    def test_parse_timeseries(self):
        rows = abuse.parse_timeseries(CSV)
        self.assertEqual(len(rows), 4)
        self.assertEqual(rows[1], {"second": 1.0, "tx_pps": 100.0, "rx_video_pps": 290.0,
                                   "e2e_p99_ms": 6.5, "active": 12.0})
        self.assertIsNone(rows[3]["rx_video_pps"])
        self.assertEqual(abuse.parse_timeseries(""), [])
        self.assertEqual(abuse.parse_timeseries("a,b\n1,x\n"), [{"a": 1.0, "b": None}])

    def test_whole_seconds_inside(self):
        rows = abuse.parse_timeseries(CSV)
        q = abuse.window(rows, 1000.0, 1000.0, 1002.0)
        self.assertEqual(q["seconds"], 2)
        self.assertAlmostEqual(q["loss"], 1 - 590 / 600)
        self.assertEqual(q["p99"], 6.5)
        self.assertEqual(q["active"], 12)

    def test_every_second_touched(self):
        rows = abuse.parse_timeseries(CSV)
        a = abuse.window(rows, 1000.0, 1001.5, 1002.2, whole=False)
        self.assertEqual(a["seconds"], 2)
        self.assertEqual(a["p99"], 40.0)
        self.assertEqual(a["active"], 11)

    def test_empty_cases(self):
        rows = abuse.parse_timeseries(CSV)
        self.assertIsNone(abuse.window(rows, None, 0, 1))
        self.assertIsNone(abuse.window(rows, 1000.0, 2000.0, 2001.0))
        # No video sent: no loss figure; missing P99 counts as 0.
        r = abuse.window([{"second": 0.0, "tx_pps": 0.0, "rx_video_pps": 0.0,
                           "e2e_p99_ms": None, "active": 12.0}], 0.0, 0.0, 1.0)
        self.assertIsNone(r["loss"])
        self.assertEqual(r["p99"], 0)


def result(name, verdict="PASS", **kw):
    r = {"attack": name, "http": "413 payload_too_large", "up": True,
         "legit_quiet": w(0.0, 4.4), "legit_attack": w(0.001, 16.04),
         "rss0": 29.4, "rss1": 30.6, "fds0": 41, "fds1": 43, "log_bytes": 0,
         "verdict": verdict, "reason": ""}
    r.update(kw)
    return r


class Report(unittest.TestCase):
    def test_row_cells(self):
        self.assertEqual(abuse.table_row(result("patch-8000-mlines")),
                         ["patch-8000-mlines", "413 payload_too_large", "yes", "0.0%->0.1%",
                          "4.4->16.0", "29->31", "41->43", "0", "PASS"])

    def test_missing_figures_are_dashes(self):
        cells = abuse.table_row(result("x", legit_quiet=None, legit_attack=w(None, 3.0),
                                       rss0=None, fds1=None, log_bytes=None, up=False,
                                       verdict="FAIL"))
        self.assertEqual(cells[2:], ["NO", "-->-", "-->3.0", "-->31", "41->-", "-", "FAIL"])

    def test_sigterm_up_is_not_applicable(self):
        self.assertEqual(abuse.table_row(result("sigterm-partial-header", up=False))[2], "n/a")

    def test_http_is_cut_to_38_characters(self):
        self.assertEqual(len(abuse.table_row(result("x", http="y" * 100))[1]), 38)

    def test_log_bytes_units(self):
        self.assertEqual(abuse.fmt_bytes(0), "0")
        self.assertEqual(abuse.fmt_bytes(10239), "10239")
        self.assertEqual(abuse.fmt_bytes(20 * 1024), "20K")
        self.assertEqual(abuse.fmt_bytes(50 * 1048576), "50M")
        self.assertEqual(abuse.fmt_bytes(None), "-")

    def test_table_layout(self):
        lines = abuse.format_table([
            result("patch-8000-mlines"),
            result("garbage-14000", verdict="FAIL", http="11593/14000 dropped",
                   reason="unaccounted +2258"),
        ])
        self.assertEqual(lines[0].split(), ["attack", "http", "up", "loss", "q->a", "P99ms",
                                            "q->a", "RSS", "MiB", "fds", "log", "B", "verdict"])
        self.assertTrue(set(lines[1]) <= {"-", " "})
        # Columns line up: each column starts where its header does.
        col = lines[0].index("verdict")
        self.assertEqual(lines[2][col:], "PASS")
        self.assertEqual(lines[3][col:], "FAIL")
        self.assertEqual(lines[0].index("fds"), lines[2].index("41->43"))
        self.assertEqual(lines[4], "")
        self.assertEqual(lines[5], "PASS patch-8000-mlines: ok")
        self.assertEqual(lines[6], "FAIL garbage-14000: unaccounted +2258")
        self.assertTrue(all(l == l.rstrip() for l in lines))

    def test_summary_line(self):
        s = abuse.summary_line([1, 2, 3], 1, "/t/corelay", "2026-12-07 03:00", "abc1234", True,
                               True, 2, 301.4, "/o")
        self.assertEqual(s, "2/3 rows passed; server /t/corelay (built 2026-12-07 03:00; tree at "
                            "abc1234 + uncommitted changes), auth on, 2 shards; 301s; outputs in /o")


class Tokens(unittest.TestCase):
    def test_jwt_hs256_verifies(self):
        claims = abuse.claims_for("demo", "alice", now=1000, ttl=60)
        self.assertEqual(claims, {"sub": "alice", "exp": 1060, "iat": 1000, "room": "demo"})
        tok = abuse.jwt_hs256("s3cret", claims)
        head, body, sig = tok.split(".")
        pad = lambda x: x + "=" * (-len(x) % 4)  # noqa: E731
        self.assertEqual(json.loads(base64.urlsafe_b64decode(pad(head))),
                         {"alg": "HS256", "typ": "JWT"})
        self.assertEqual(json.loads(base64.urlsafe_b64decode(pad(body))), claims)
        want = hmac.new(b"s3cret", f"{head}.{body}".encode(), hashlib.sha256).digest()
        self.assertEqual(base64.urlsafe_b64decode(pad(sig)), want)
        self.assertNotIn("=", tok)

    def test_admin_and_roomless_claims(self):
        c = abuse.claims_for(None, "root", admin=True, now=0)
        self.assertNotIn("room", c)
        self.assertTrue(c["admin"])


OFFER = ("v=0\r\no=- 1 1 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\na=group:BUNDLE 0 1\r\n"
         "m=video 9 UDP/TLS/RTP/SAVPF 96 102\r\nc=IN IP4 0.0.0.0\r\na=ice-ufrag:abcd\r\n"
         "a=ice-pwd:pwpwpwpwpwpwpwpwpwpwpwpw\r\na=mid:0\r\na=sendonly\r\n"
         "a=rtpmap:96 VP8/90000\r\na=rtpmap:102 H264/90000\r\n"
         "m=video 9 UDP/TLS/RTP/SAVPF 96\r\na=mid:1\r\na=recvonly\r\na=rtpmap:96 VP8/90000\r\n")


class Sdp(unittest.TestCase):
    def test_sections_and_join_round_trip(self):
        sess, media = abuse.sections(OFFER)
        self.assertEqual(len(sess), 5)
        self.assertEqual([m[0] for m in media], ["m=video 9 UDP/TLS/RTP/SAVPF 96 102",
                                                 "m=video 9 UDP/TLS/RTP/SAVPF 96"])
        self.assertEqual(abuse.join_sdp(sess, media), OFFER)

    def test_with_copies_adds_minimal_recvonly_sections_to_the_bundle(self):
        sdp = abuse.with_copies(OFFER, 3)
        sess, media = abuse.sections(sdp)
        self.assertEqual(len(media), 5)
        self.assertIn("a=group:BUNDLE 0 1 x0 x1 x2", sess)
        self.assertEqual(media[-1], ["m=video 9 UDP/TLS/RTP/SAVPF 102", "a=mid:x2", "a=recvonly",
                                     "a=rtpmap:102 H264/90000"])

    def test_dup_pt_repeats_the_h264_payload_type(self):
        sdp, pt = abuse.with_dup_pt(OFFER)
        self.assertEqual(pt, "102")
        _, media = abuse.sections(sdp)
        self.assertEqual(media[-1][0], "m=video 9 UDP/TLS/RTP/SAVPF 102")
        self.assertIn("a=mid:dup", media[-1])
        self.assertIn("a=ice-ufrag:abcd", media[-1])

    def test_reordered_keeps_the_bundle_order(self):
        sess, media = abuse.sections(abuse.reordered(OFFER))
        self.assertEqual([l for m in media for l in m if l.startswith("a=mid:")],
                         ["a=mid:1", "a=mid:0"])
        self.assertIn("a=group:BUNDLE 0 1", sess)

    def test_with_ufrag(self):
        self.assertIn("a=ice-ufrag:evil\r\n", abuse.with_ufrag(OFFER, "evil"))
        self.assertNotIn("abcd", abuse.with_ufrag(OFFER, "evil"))

    def test_recv_section_and_first_h264_pt(self):
        _, media = abuse.sections(OFFER)
        self.assertEqual(abuse.recv_section(media)[1], "a=mid:1")
        self.assertEqual(abuse.first_h264_pt(media), "102")
        self.assertEqual(abuse.first_h264_pt(media[1:]), "102")  # the fallback


class Packets(unittest.TestCase):
    def test_stun_bomb_layout(self):
        p = abuse.stun_bomb(0x8023, 14995, tid=b"\x01" * 12)
        self.assertEqual(len(p), 20 + 4 * 14995)
        self.assertLess(len(p), 65507)  # one UDP datagram
        typ, length, cookie = struct.unpack("!HHI", p[:8])
        self.assertEqual((typ, length, cookie), (1, 4 * 14995, 0x2112A442))
        self.assertEqual(p[8:20], b"\x01" * 12)
        self.assertEqual(p[20:24], b"\x80\x23\x00\x00")
        self.assertEqual(p[-4:], b"\x80\x23\x00\x00")
        # The one-liner.
        a = struct.pack("!HH", 0x8023, 0) * 14995
        self.assertEqual(p, struct.pack("!HHI", 1, len(a), 0x2112A442) + b"\x01" * 12 + a)

    def test_stun_bomb_transaction_ids_differ(self):
        self.assertNotEqual(abuse.stun_bomb(1, 1)[8:20], abuse.stun_bomb(1, 1)[8:20])

    def test_rfc4571(self):
        self.assertEqual(abuse.rfc4571(b""), b"\x00\x00")
        self.assertEqual(abuse.rfc4571(b"abc"), b"\x00\x03abc")
        self.assertEqual(abuse.rfc4571(b"x" * 60020)[:2], struct.pack("!H", 60020))

    def test_pipelined_requests(self):
        b = abuse.pipelined_requests("/assets/app.js", 3)
        self.assertEqual(b.count(b"GET /assets/app.js HTTP/1.1\r\n"), 3)
        self.assertTrue(b.endswith(b"\r\n\r\n"))
        self.assertEqual(b.count(b"\r\n\r\n"), 3)


class Misc(unittest.TestCase):
    def test_status_str(self):
        self.assertEqual(abuse.status_str(None), "no answer")
        self.assertEqual(abuse.status_str(413, '{"code":"payload_too_large","message":"x"}'),
                         "413 payload_too_large")
        self.assertEqual(abuse.status_str(204, ""), "204")
        self.assertEqual(abuse.status_str(500, "<html>"), "500")

    def test_source_ip_spreads_connections_over_loopback_addresses(self):
        self.assertEqual(abuse.source_ip(0, 60), "127.0.0.2")
        self.assertEqual(abuse.source_ip(59, 60), "127.0.0.2")
        self.assertEqual(abuse.source_ip(60, 60), "127.0.0.3")
        self.assertEqual(abuse.source_ip(299, 60), "127.0.0.6")
        self.assertEqual(abuse.source_ip(0, 0), "127.0.0.2")
        with self.assertRaises(ValueError):
            abuse.source_ip(253 * 10, 10)

    def test_new_log_lines_skips_debug_trace_and_blank(self):
        data = (b"2026 WARN a\n\n2026 DEBUG b\n2026 TRACE c\n2026 ERROR d\xff\n")
        self.assertEqual(abuse.new_log_lines(data), ["2026 WARN a", "2026 ERROR d\ufffd"])

    def test_garbage_tolerance(self):
        self.assertEqual(abuse.garbage_tolerance(14000, 1000), 140)
        self.assertEqual(abuse.garbage_tolerance(14000, 2463), 246.3)
        self.assertEqual(abuse.garbage_tolerance(14000, 1000, 2333), 2473)
        self.assertEqual(abuse.garbage_tolerance(0, 0), 0)

    def test_last_json(self):
        self.assertEqual(abuse.last_json('noise\n{"a": 1}\n{"b": 2}\ntrailer\n'), {"b": 2})
        self.assertEqual(abuse.last_json('{"a": 1}\n{broken\n'), {"a": 1})
        self.assertIsNone(abuse.last_json(""))
        self.assertIsNone(abuse.last_json(None))

    def test_ingress_drops_sums_the_arrival_counters_only(self):
        t = {k: 1 for k in abuse.INGRESS_DROPS}
        t.update({"dropped_requests": 100, "dropped_send": 7})
        self.assertEqual(abuse.ingress_drops(t), 5)
        self.assertEqual(abuse.ingress_drops({}), 0)


if __name__ == "__main__":
    unittest.main()
