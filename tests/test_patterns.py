"""Each redaction pattern of redaction.py: what it must take out, and a near miss it must leave.

Token shapes, one case per prefix a shape names; the names that
mark a value as secret (redaction.SECRET_NAME: *TOKEN*, *KEY*, *SECRET*, *PASSWORD*, *PASSWD*, AWS_*), as
NAME=value and as --name value; home directories. A pattern narrowed (ASIA… keys, ghs_ tokens,
PASSWD dropped) fails a "taken" case; one widened fails a near miss.
"""

import re

import pytest

from gemmscope.redaction.policy import REDACTED, Redactor

BODY = "aB3dE5gH7jK9mN1pQ3sT5vW7yZ9bC2eF4"  # 34 letters and digits

# token shape (as the policy in redaction.RULES writes it) -> (tokens it takes, near misses no rule takes):
# every prefix a shape names, which tests/test_redaction.py's one case per rule does not reach
SHAPES = {
    r"hf_[A-Za-z0-9]{30,}": (["hf_" + BODY[:30]], ["hf_" + BODY[:29], "xhf_" + BODY, "hf-" + BODY]),
    r"gh[pousr]_[A-Za-z0-9]{30,}": (
        [f"gh{kind}_{BODY[:30]}" for kind in "pousr"],
        ["ghx_" + BODY, "gh_" + BODY, "ghp_" + BODY[:29], "sghp_" + BODY]),
    r"github_pat_[A-Za-z0-9_]{30,}": (["github_pat_11AAAAAAA0_" + BODY[:20]], ["github_pat_" + BODY[:29]]),
    r"sk-[A-Za-z0-9_-]{20,}": (["sk-" + BODY[:20], "sk-proj-" + BODY], ["sk-" + BODY[:19], "task-" + BODY]),
    r"xox[abposr]-[A-Za-z0-9-]{10,}": (
        [f"xox{kind}-123456-abcdef" for kind in "abposr"],
        ["xoxz-123456-abcdef", "xoxb-12345678", "xxoxb-123456-abcdef"]),
    r"(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Z0-9])": (
        ["AKIAIOSFODNN7EXAMPLE", "ASIAIOSFODNN7EXAMPLE"],
        ["AKIBIOSFODNN7EXAMPLE", "ASIAIOSFODNN7EXAMPL", "ASIAIOSFODNN7EXAMPLEX", "XASIAIOSFODNN7EXAMPLE",
         "ASIAiosfodnn7example"]),
}


@pytest.mark.parametrize("shape", SHAPES)
def test_shape_takes_its_tokens_wherever_they_stand(shape):
    taken, _ = SHAPES[shape]
    for token in taken:
        assert re.fullmatch(shape, token), token  # the case is this shape's
        assert Redactor()(f"got {token}, then") == f"got {REDACTED}, then"


@pytest.mark.parametrize("shape", SHAPES)
def test_shape_leaves_near_misses(shape):
    _, near_misses = SHAPES[shape]
    for text in near_misses:
        assert Redactor()(f"got {text}, then") == f"got {text}, then"


SECRET_NAMES = ["HF_TOKEN", "MY_API_KEY", "CLIENT_SECRET", "DB_PASSWORD", "MYSQL_PASSWD", "AWS_REGION", "token",
                "Passwd"]
# names that say nothing secret (KY is no KEY, PASSWRD no PASSWD, AWSREGION no AWS_ variable)
PLAIN_NAMES = ["TOKE", "KY", "SECRT", "PASSWRD", "PASSWOR", "AWSREGION", "MY_AWS"]


@pytest.mark.parametrize("name", SECRET_NAMES)
def test_secret_named_values_are_redacted(name):
    redact = Redactor()
    assert redact(f"{name}=abc123 next") == f"{name}={REDACTED} next"
    if not name.startswith("AWS_"):  # AWS_* names variables; --aws-region is an option like any other
        option = "--" + name.lower().replace("_", "-")
        assert redact(f"train.py {option} abc123 --steps 3") == f"train.py {option} {REDACTED} --steps 3"
        assert redact(f"train.py {option}=abc123") == f"train.py {option}={REDACTED}"


@pytest.mark.parametrize("name", PLAIN_NAMES)
def test_plain_named_values_are_kept(name):
    redact = Redactor()
    for text in (f"{name}=abc123 next", f"train.py --{name.lower()} abc123", f"train.py --{name.lower()}=abc123"):
        assert redact(text) == text


@pytest.mark.parametrize("text, redacted", [
    ("/home/alice/x.py", f"{REDACTED}/x.py"),
    ("in /Users/bob: ok", f"in {REDACTED}: ok"),
    ("/root/.cache and /root", f"{REDACTED}/.cache and {REDACTED}"),
    ("/homes/alice/x.py", f"/homes/{REDACTED}/x.py"),  # a per-user path: the user, not the folder
    ("/rootfs/x /Users and /usr/bin", None),
])
def test_home_directories(text, redacted):
    assert Redactor()(text) == (text if redacted is None else redacted)


def test_recorded_values_at_their_edges():
    # the shortest secret value taken wherever it appears; a recorded folder with its trailing
    # slash still matches the path; an empty recorded name matches nothing
    assert Redactor(secret_values=["a1b2c3"])("x a1b2c3 y") == f"x {REDACTED} y"
    assert Redactor(secret_values=["a1b2c"])("x a1b2c y") == "x a1b2c y"
    assert Redactor(paths=["/data/proj/"])("in /data/proj/x.py") == f"in {REDACTED}/x.py"
    assert Redactor(paths=["/data/projX"])("in /data/projX/x.py") == f"in {REDACTED}/x.py"
    assert Redactor(names=["", REDACTED])("a - b") == "a - b"
