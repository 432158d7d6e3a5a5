"""The redaction policy (redaction.RULES): each rule takes out what it names, anywhere in a text, and
leaves its near miss; --keep leaves what the user names; the counts say what went, per kind."""

import pytest

from gemmscope.redaction.policy import REDACTED, RULES, TRIGGERS, Redactor

# kind -> (text holding one match, what is left of it, a near miss that must stay as it is)
CASES = {
    "undecodable-text": ("SQLite: Could not decode to UTF-8 column 'value' with text 'pw hunter2 it's \ufffd')",
                         f"SQLite: Could not decode to UTF-8 column 'value' with text '{REDACTED}')",
                         "Could not decode the name"),
    "private-key": ("key: -----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk\n-----END OPENSSH PRIVATE KEY----- ok",
                    f"key: {REDACTED} ok", "-----BEGIN PUBLIC KEY----- MIIBIjAN"),
    "secret-assignment": ("train.py --password=hunter2 --steps 3", f"train.py --password={REDACTED} --steps 3",
                          "train.py --steps 3 TOKENIZERS_PARALLELISM"),
    "authorization-header": ("curl -H 'Authorization: Basic dXNlcjpwYXNzd29yZA==' x", f"curl -H 'Authorization: {REDACTED}' x",
                             "the authorization of a run"),
    "bearer-token": ("header Bearer abcdefABCDEF0123456789", f"header Bearer {REDACTED}", "the bearer of bad news"),
    "basic-auth": ("auth Basic dXNlcjpwYXNz", f"auth Basic {REDACTED}", "basic blocks, Basic Operations"),
    "wandb-key": ("wandb login " + "0123456789abcdef" * 2 + "01234567", f"wandb login {REDACTED}",
                  "commit 0123456789abcdef0123456789abcdef01234567"),
    "jwt": ("token eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N",
            f"token {REDACTED}", "eyJhbGciOiJIUzI1NiJ9 alone"),
    "hugging-face-token": ("loaded hf_" + "Ab1" * 12 + ".", f"loaded {REDACTED}.", "hf_short and hf_" + "x" * 29),
    "github-token": ("ghp_" + "x1" * 18, REDACTED, "ghp_tooshort"),
    "api-key": ("sk-ant-api03-" + "Q9" * 16, REDACTED, "task-0123456789abcdefghijklmn"),
    "google-api-key": ("AIza" + "S" * 35, REDACTED, "AIza" + "S" * 20),
    "slack-token": ("xoxb-123456789012-abcdefABCDEF", REDACTED, "xoxb-short"),
    "aws-key-id": ("id AKIAIOSFODNN7EXAMPLE;", f"id {REDACTED};", "AKIAIOSFODNN7EXAMPLEX"),
    "vendor-token": ("publish with glpat-" + "aB3_" * 5 + " now", f"publish with {REDACTED} now",
                     "npm_config_cache_directory and glpat-short"),
    "url-user-info": ("clone https://alice:s3cr3t@gitlab:8443/x.git", f"clone https://{REDACTED}@gitlab:8443/x.git",
                      "https://github.com/org/repo@v1.2 and torch@2.5"),
    "email": ("mail jane.smith@example-corp.com now", f"mail {REDACTED} now", "torch@2.5 and @torch.compile"),
    "user-at-host": ("ssh alice@login01:~/x", f"ssh {REDACTED}:~/x", "torch@2.5, repo@v1.2 and @torch.compile"),
    "ip-address": ("master 10.12.0.7:29500 and fe80::1ff:fe23:4567:890a", f"master {REDACTED}:29500 and {REDACTED}",
                   "cuBLASLt 12.9.1, nsys 2023.4.1.97, at 12:34:56, c10::add, 300.1.2.3"),
    "host-name": ("on gpu-node-17.corp.example.com:", f"on {REDACTED}:",
                  "torch.nn.Linear train.py libcublasLt.so.12 trace.sqlite.xz model.layers.3.self_attention"),
    "home-path": ("/home/alice/.venv/lib/x.py:12", f"{REDACTED}/.venv/lib/x.py:12", "/rootfs/usr/lib /opt/myhome/x"),
    "per-user-path": ("cd /gpfs/scratch/alice/run1", f"cd /gpfs/scratch/{REDACTED}/run1", "/usr/share/doc /opt/scratchpad/x"),
    "unc-path": (r"open \\\\fs01\\proj\\ckpt.pt", rf"open {REDACTED}\\ckpt.pt", "https://host/x and /usr//lib"),
}


def test_every_rule_has_a_case():
    assert sorted(CASES) == sorted(kind for kind, _ in RULES)


@pytest.mark.parametrize("kind", sorted(CASES))
def test_rule_redacts_its_match_and_counts_it(kind):
    text, left, _ = CASES[kind]
    redact = Redactor()
    assert redact(text) == left
    assert set(redact.counts) == {kind}, redact.counts
    assert redact.summary() == f"{redact.counts[kind]} {kind}"


@pytest.mark.parametrize("kind", sorted(CASES))
def test_rule_leaves_its_near_miss(kind):
    near_miss = CASES[kind][2]
    redact = Redactor()
    assert redact(near_miss) == near_miss
    assert redact.summary() == "nothing"


@pytest.mark.parametrize("text, left", [
    ("C:\\Users\\alice\\proj\\train.py", f"{REDACTED}\\proj\\train.py"),
    ("at C:/Users/alice/proj/train.py:12", f"at {REDACTED}/proj/train.py:12"),
    ('"file": "C:\\\\Users\\\\alice\\\\x.py"', f'"file": "{REDACTED}\\\\x.py"'),  # as JSON writes it
    ("d:\\users\\bob", REDACTED),  # Windows' names are in any case
    ("C:\\Program Files\\x and C:\\Users", "C:\\Program Files\\x and C:\\Users"),  # no user named
])
def test_windows_home_directories(text, left):
    assert Redactor()(text) == left


@pytest.mark.parametrize("text, left", [
    ("https://user:ghs_tok3n@git.example.com/org/x.git", f"https://{REDACTED}@{REDACTED}/org/x.git"),
    ("git+ssh://deploy@10.0.0.7/repo", f"git+ssh://{REDACTED}@{REDACTED}/repo"),
    ("https://bob@intranet/wiki", f"https://{REDACTED}@intranet/wiki"),
    ("https://github.com/NVIDIA/TransformerEngine", "https://github.com/NVIDIA/TransformerEngine"),
])
def test_urls_lose_their_user_info_and_private_host(text, left):
    assert Redactor()(text) == left


def test_recorded_values_come_after_what_their_shape_says():
    """A recorded user name at the start of an e-mail address: the whole address goes, not the
    name alone (which left '[redacted].smith@example-corp.com')."""
    redact = Redactor(names=["jane"])
    assert redact("jane.smith@example-corp.com and jane") == f"{REDACTED} and {REDACTED}"
    assert redact.counts == {"email": 1, "user-or-host-name": 1}


def test_summary_says_the_most_redacted_kind_first_and_ties_by_name():
    """Counted by count, most first, whatever the order of the kinds' names or of their matches;
    kinds redacted as often, by name."""
    redact = Redactor()
    redact("via gpu-7.example.net: mail a@example.com, ops@example.com, 10.0.0.7, 10.0.0.8 and 10.0.0.9 "
           "from gpu-8.example.net")  # host name first seen, e-mail next, most IP addresses
    assert redact.counts == {"ip-address": 3, "email": 2, "host-name": 2}
    assert redact.summary() == "3 ip-address, 2 email, 2 host-name"


def test_keep_leaves_what_the_user_names_and_does_not_count_it():
    text = "see docs.example.org and 10.0.0.1 from gpu-1.corp.example.com"
    redact = Redactor(keep=["*.example.org", "10.0.*"])
    assert redact(text) == f"see docs.example.org and 10.0.0.1 from {REDACTED}"
    assert redact.summary() == "1 host-name"


def test_keep_matches_the_value_not_the_option_name():
    assert Redactor(keep=["public-*"])("--token=public-demo --token=private") == (
        f"--token=public-demo --token={REDACTED}")


def test_public_sites_gemmscope_cites_stay():
    text = "https://www.nvidia.com/en-us/data-center/h100/ and https://json-schema.org/draft/2020-12/schema"
    assert Redactor()(text) == text
    assert Redactor()("jane@nvidia.com") == REDACTED


def test_frame_redacts_text_labels_and_cells_and_leaves_the_rest():
    """A table's text column names and text cells (object, string and categorical columns) are
    redacted; a label or a cell that is not text (a pivot's numbered columns, counts) stays as it is."""
    import pandas as pd

    table = pd.DataFrame({"ops@example.com": ["a@example.com", None, 3], 7: [1, 2, 3],
                          "host": pd.Categorical(["gpu-7.example.net", "x", "x"]),
                          "note": pd.Series(["see 10.0.0.7", "ok", pd.NA], dtype="string")})
    redact = Redactor()
    out = redact.frame(table)
    assert list(out.columns) == [REDACTED, 7, "host", "note"]
    assert out[REDACTED].tolist() == [REDACTED, None, 3] and out[7].tolist() == [1, 2, 3]
    assert out["host"].tolist() == [REDACTED, "x", "x"]
    assert out["note"].tolist()[:2] == [f"see {REDACTED}", "ok"] and pd.isna(out["note"].iloc[2])
    assert redact.counts == {"email": 2, "host-name": 1, "ip-address": 1}
    assert table.columns[0] == "ops@example.com"  # the table given is left as it was


@pytest.mark.parametrize("kind, pattern", RULES)
def test_every_text_a_rule_matches_holds_its_trigger(kind, pattern):
    """A text no trigger finds is left as it is without running the rules: each rule's trigger
    must find every text the rule itself matches, texts hypothesis builds from the rule's own
    regex (in any case where the rule takes any)."""
    import re

    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    rule = re.compile(pattern.replace("(?P<lead>", "(?:"))
    trigger = re.compile("|".join(TRIGGERS[kind]))

    @settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.from_regex(rule))
    def holds(text):
        if rule.search(text):
            assert trigger.search(text.lower()), text

    holds()


def test_a_text_no_trigger_finds_is_left_and_a_recorded_value_is_a_trigger():
    """Torch's operator ranges (emit_nvtx), one per call, run through no rule; a value the trace
    recorded is found wherever it stands, in any case."""
    redact = Redactor(names=["AliceW"])
    name = "aten::copy_, op_id = 212, sizes = [[0], [0], []], input_op_ids = [(211,0), (208,0), (0,-1)]"
    assert not redact._could_match(name.lower()) and redact(name) == name
    assert redact("autograd::engine::evaluate_function: AliceWBackward0") == (
        "autograd::engine::evaluate_function: AliceWBackward0")  # a name is a whole word
    assert redact._could_match("x AliceW y".lower()) and redact("x AliceW y") == f"x {REDACTED} y"
    assert redact.counts == {"user-or-host-name": 1}



def test_texts_searched_at_once_are_redacted_and_counted_as_one_by_one():
    """Redactor.texts (a trace's distinct names, the triggers searched in all of them joined)
    says and counts what a call per text does: each case's match and its near miss, a recorded
    value split across two texts (found in neither), one next to the separator the texts are
    joined with, and texts met before (the first seven, given again)."""
    texts = [text for text, _, near_miss in CASES.values() for text in (text, near_miss)]
    texts += ["x Alice", "W y", "AliceW\x00", "plain", "autograd::engine::evaluate_function: AliceWBackward0"]
    one_by_one = Redactor(names=["AliceW"])
    first, second = [one_by_one(t) for t in texts[:7]], [one_by_one(t) for t in texts]
    at_once = Redactor(names=["AliceW"])
    assert at_once.texts(texts[:7]) == first and at_once.texts(texts) == second
    assert at_once.counts == one_by_one.counts and at_once.counts["user-or-host-name"] == 1
