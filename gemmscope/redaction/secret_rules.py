"""The redaction policy's text rules (docs/redaction.md): what is taken out of every text gemmscope
writes for sharing by its shape alone, each rule a regex that runs in time linear in its text
(tests/test_bounded.py), and the triggers that let a text none of them can match pass untouched.
The Redactor that applies them is gemmscope.redaction.policy's.

Where a value cannot be classified the rules fail closed: the value of any key, variable or option
whose name says secret, token, password, key, auth or credential goes whatever its shape, as does
everything after an Authorization header's name.
"""

from __future__ import annotations

import re

REDACTED = "[redacted]"

# Characters that continue a path name: a path matches only where none of them is just before
# it or just after it ("/bin" is not redacted inside "/usr/bin" or "/binaries").
PATH_CHAR = r"[A-Za-z0-9_.~+-]"
# Names of environment variables, options and keys whose values are secrets (HF_TOKEN,
# MY_API_KEY, AWS_SECRET_ACCESS_KEY, DB_PASSWORD, DB_PASS, MYSQL_PWD, GOOGLE_CREDENTIALS,
# HTTP_AUTH, --api-key, --token; the key words of public secret scanners' generic rules). "pass"
# and "pwd" count only as a word of a longer name (DB_PASS), never alone: gemmscope's own ranges
# say `pass=fprop`. The name's tail is taken possessively (`*+`): nothing after a name is a name
# character, and giving one back only made every long identifier (a kernel's name) cost a
# backtrack per character. Its head is the first secret word found (an atomic group, never
# tried again): a name holding the word many times was otherwise scanned to its end once per
# word, in time quadratic in its length.
SECRET_NAME = (r"(?i:(?>[A-Za-z0-9_-]*?(?:TOKEN|KEY|SECRET|PASSWORD|PASSWD|PASSPHRASE|CREDENTIAL|CREDS|AUTH(?!OR)"
               r"|[_-](?:PASS|PWD)(?![A-Za-z])))[A-Za-z0-9_-]*+|AWS_[A-Za-z0-9_]++)")
# A secret-named variable's or option's value shorter than this is a setting, not a credential
# (TOKENIZERS_PARALLELISM=false, HF_HUB_DISABLE_TOKEN=1): redacting it wherever it appears would
# take "1" out of every number. Where it is assigned (NAME=value) it is redacted all the same.
MIN_SECRET_LENGTH = 6
# The value after a secret name: quoted (to its closing quote, or to the line's end where there
# is none: a value cut short is still a value), or up to the next separator; with the scheme
# before a credential (token: Bearer …) and never a private key's first word (the private-key
# rule takes its block whole).
_VALUE = r"(?!-----BEGIN )(?:(?i:basic|bearer|digest)[ \t]+)?(?:\"[^\"\r\n]*\"?|'[^'\r\n]*'?|[^\s\"',;&|]+)"
# A key of a key/value form that names a secret: one whose last word says so (api_key, "password",
# HF_TOKEN, credentials), not one that only holds the word (load_by_key_path_data: compile_id=0,
# as torch.profiler names its calls).
_SECRET_KEY = (r"(?i:[A-Za-z0-9_-]*?(?:TOKEN|KEY|SECRET|PASSWORD|PASSWD|PASSPHRASE|CREDENTIAL|CREDS|AUTH|[_-]PASS"
               r"|[_-]PWD)S?)(?![A-Za-z0-9_-])")
# How a name is given its value: NAME=value, --name value, --name=value, and the key/value forms
# of configuration files and logs (key: value, "key": "value", key = value, key => value,
# key := value); never `::` (C++ and torch's scopes: cutlass::Key: 3).
_ASSIGNS = (rf"(?:--?{SECRET_NAME}(?:=|[ \t]+)|{SECRET_NAME}="
            rf"|[\"']?{_SECRET_KEY}[\"']?[ \t]*(?::(?!:)|:?=>?|\?=)[ \t]*)")
_IPV4_PART = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_IPV4 = rf"{_IPV4_PART}(?:\.{_IPV4_PART}){{3}}"
_HEX4 = r"[0-9A-Fa-f]{1,4}"
# Top-level domains a host name of two labels or more is recognised by: the generic ones, the
# private ones clusters use, and a few countries' (not those that are also file suffixes: .py,
# .sh, .so, .md, .cu).
_TLDS = ("com|net|org|edu|gov|mil|io|ai|dev|app|cloud|local|localdomain|internal|intranet|lan|corp|cluster"
         "|uk|de|fr|jp|cn|kr|au|eu|nl|ru|br")
# Every country's top-level domain (IANA's root zone), recognised in a host name of three labels
# or more written in lower case (node3.hpc.cineca.it, login.ethz.ch): but those that are also file
# suffixes (config.h.in, model.final.pt, x.tar.sh, Makefile.am) or torch's operators
# (torch.sparse.mm, torch.special.gt), which a dotted Python or file name ends with as often as a
# host does (_NOT_HOST_TLDS).
_ALL_COUNTRY_TLDS = (
    "ac ad ae af ag ai al am ao aq ar as at au aw ax az ba bb bd be bf bg bh bi bj bm bn bo br bs bt bw by bz ca cc "
    "cd cf cg ch ci ck cl cm cn co cr cu cv cw cx cy cz de dj dk dm do dz ec ee eg er es et eu fi fj fk fm fo fr ga "
    "gd ge gf gg gh gi gl gm gn gp gq gr gs gt gu gw gy hk hm hn hr ht hu id ie il im in io iq ir is it je jm jo jp "
    "ke kg kh ki km kn kp kr kw ky kz la lb lc li lk lr ls lt lu lv ly ma mc md me mg mh mk ml mm mn mo mp mq mr ms "
    "mt mu mv mw mx my mz na nc ne nf ng ni nl no np nr nu nz om pa pe pf pg ph pk pl pm pn pr ps pt pw py qa re ro "
    "rs ru rw sa sb sc sd se sg sh si sk sl sm sn so sr ss st su sv sx sy sz tc td tf tg th tj tk tl tm tn to tr tt "
    "tv tw tz ua ug uk us uy uz va vc ve vg vi vn vu wf ws ye yt za zm zw").split()
_NOT_HOST_TLDS = "ac am cc cr cu ge gt in lt md mk ml mm ne pl pm ps pt py rs sh so tf".split()
_COUNTRY_TLDS = "|".join(tld for tld in _ALL_COUNTRY_TLDS if tld not in _NOT_HOST_TLDS)
# The second-level domains under which countries register universities, firms and governments
# (iitb.ac.in, x.com.pt, uw.edu.pl): with one of them before it, any country's domain is a host's.
_SECOND_LEVEL = "ac|co|com|edu|gov|net|org|gob|nic|res"
_LOWER_LABEL = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
# The prefixes of other services' tokens, as their issuers write them (those that also start common
# words with the shape of what follows: `npm_config_cache` is npm's setting, not a token), and in
# lower case as triggers.
_VENDOR_PREFIXES = (r"glpat-", r"gldt-", r"glrt-", r"glptt-", r"glsoat-", r"glcbt-", r"npm_(?=[A-Za-z0-9]{36}\b)",
                    r"pypi-", r"do[opr]_v1_", r"[sr]k_(?:live|test|prod)_", r"shp(?:at|ca|pa|ss)_",
                    r"SG\.(?=[A-Za-z0-9_-]{22}\.)", r"dapi(?=[a-f0-9]{32})", r"pplx-", r"pul-(?=[a-f0-9]{40})",
                    r"pnu_", r"lin_api_", r"rubygems_", r"sntry[us]_", r"xkeysib-", r"dp\.pt\.", r"hvs\.", r"ops_eyJ")
_VENDOR_TRIGGERS = ("glpat-", "gldt-", "glrt-", "glptt-", "glsoat-", "glcbt-", "npm_", "pypi-", "do[opr]_v1_",
                    "sk_(?:live|test|prod)_", "rk_(?:live|test|prod)_", "shp(?:at|ca|pa|ss)_", r"sg\.", "dapi",
                    "pplx-", "pul-", "pnu_", "lin_api_", "rubygems_", "sntry[us]_", "xkeysib-", r"dp\.pt\.", r"hvs\.",
                    "ops_eyj")
# A Windows path separator, also as JSON or a C string writes it (\\) and with forward slashes.
_WINDOWS_SEPARATOR = r"(?:\\{1,2}|/)"
# A user's folder's name in a path: up to the next separator of any system.
_PATH_USER = r"[^/\\\s\"'`:;,=|*?<>]+"
# The folders that hold one folder per user, the user's name next: home directories
# (/home/NAME, /Users/NAME, C:\Users\NAME in any case, also with / and as JSON writes it) and
# clusters' per-user scratch and home spaces (/scratch/NAME, /scratch1/NAME, /gpfs/scratch/NAME,
# /p/scratch/users/NAME, /lustre/fs1/users/NAME, /global/cscratch1/sd/NAME, /global/homes/j/NAME:
# a one-letter folder of names first).
_HOME_ROOT = rf"/(?:home|Users)/|(?<![A-Za-z0-9])[A-Za-z]:{_WINDOWS_SEPARATOR}(?i:users){_WINDOWS_SEPARATOR}"
_PER_USER_ROOT = (rf"(?<!{PATH_CHAR})(?<![/\\])(?:/[A-Za-z0-9_.-]+){{0,2}}"
                  r"/(?:c?scratch[0-9]*|users?|homes)/(?:users?/|sd/|[a-z]/)?")

# The redaction policy: every rule, by kind, applied to every text gemmscope writes for sharing
# (docs/redaction.md). Where two rules match at one place the first listed wins (an e-mail
# address before the user name it starts with). `(?P<lead>…)`: a part that stays (the name of
# a secret option, so that a reader still sees that one was given).
RULES: tuple[tuple[str, str], ...] = (
    # What SQLite's error quotes of a value it could not decode (a trace's text that is no UTF-8):
    # never classified, so never shown.
    ("undecodable-text", r"(?P<lead>Could not decode to UTF-8 column '[^'\r\n]{0,256}' with text ')"
                         r"(?:[^\r\n]*(?=')|[^\r\n]*)"),
    ("private-key", r"-----BEGIN [A-Z ]*PRIVATE KEY-----(?:[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----|[\s\S]*)"),
    # An Authorization header's value whatever its scheme (Basic, Bearer, Digest, a bare token):
    # all of it to the end of the line or the quote, before the key/value rule takes "Basic" alone.
    ("authorization-header",
     r"(?P<lead>(?<![A-Za-z0-9_-])(?i:(?:proxy-)?authorization)[\"']?[ \t]*[:=][ \t]*[\"']?)[^\s\"'][^\r\n\"']*"),
    # NAME=value, --name value, --name=value, name: value, "name": "value", where the name says secret.
    ("secret-assignment", rf"(?P<lead>(?<![A-Za-z0-9_-])(?<!::){_ASSIGNS}){_VALUE}"),
    ("bearer-token", r"(?P<lead>(?<![A-Za-z0-9])(?i:bearer)[ \t]+)[A-Za-z0-9._~+/-]{16,}=*"),
    # HTTP Basic credentials (base64 of user:password) outside a header: a word of base64 holding a
    # digit, + or /, or a capital after a small letter (a word after "basic" is otherwise prose:
    # "basic blocks", "Basic Operations")
    ("basic-auth", r"(?P<lead>(?<![A-Za-z0-9])(?i:basic)[ \t]+)(?=[A-Za-z]*(?:[0-9+/]|[a-z][A-Z]))"
                   r"[A-Za-z0-9+/]{8,}={0,2}"
                   r"(?![A-Za-z0-9+/=])"),
    ("wandb-key", r"(?P<lead>wandb login[ \t]+(?:--relogin[ \t]+)?)[0-9a-f]{40}(?![0-9a-f])"
                  r"|(?<![A-Za-z0-9])local-[0-9a-f]{40}(?![0-9a-f])"),
    ("jwt", r"(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),
    ("hugging-face-token", r"(?<![A-Za-z0-9])hf_[A-Za-z0-9]{30,}"),
    # personal (ghp_), OAuth, user-to-server, server, refresh; fine-grained personal access tokens
    ("github-token", r"(?<![A-Za-z0-9])(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})"),
    ("api-key", r"(?<![A-Za-z0-9])sk-[A-Za-z0-9_-]{20,}"),  # OpenAI (sk-…, sk-proj-…), Anthropic (sk-ant-…)
    ("google-api-key", r"(?<![A-Za-z0-9])AIza[A-Za-z0-9_-]{35}(?![A-Za-z0-9_-])"),
    ("slack-token", r"(?<![A-Za-z0-9])xox[abposr]-[A-Za-z0-9-]{10,}"),
    ("aws-key-id", r"(?<![A-Za-z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Z0-9])"),  # long-term, temporary
    # Other services' tokens by the prefix their issuers document (public secret scanners' rules):
    # GitLab, npm, PyPI, DigitalOcean, Stripe, Shopify, SendGrid, Databricks, Perplexity, Pulumi,
    # Prefect, Linear, RubyGems, Sentry, Brevo, Doppler, HashiCorp Vault, 1Password.
    ("vendor-token", rf"(?<![A-Za-z0-9_.-])(?:{'|'.join(_VENDOR_PREFIXES)})[A-Za-z0-9_.=+/-]{{10,}}"),
    # The user name and password of a URL (https://user:token@host/…, git+ssh://user@host): the
    # scheme and the @ stay, and the host is a host name as any other.
    ("url-user-info", r"(?P<lead>(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]*://)[^\s/?#@\"'<>\\]+(?=@)"),
    ("email", r"(?<![A-Za-z0-9._%+-])[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}"
              r"(?![A-Za-z0-9-])"),
    # user@host as ssh, scp and prompts write it (alice@login01, bob@10.0.0.7:~/x), whole; not a
    # package's version (torch@2.5, repo@v1.2)
    ("user-at-host", rf"(?<![A-Za-z0-9._%+-])[A-Za-z0-9_][A-Za-z0-9._-]*@(?:{_IPV4}(?![0-9])"
                     r"|(?!v[0-9])[A-Za-z][A-Za-z0-9-]*(?:\.[A-Za-z0-9-]+)*)"),
    ("ip-address", rf"(?<![A-Za-z0-9_.]){_IPV4}(?![A-Za-z0-9_]|\.[0-9])"
                   rf"|(?<![A-Za-z0-9_:])(?:(?:{_HEX4}:){{7}}{_HEX4}"
                   rf"|(?=(?:[0-9A-Fa-f]*:){{3}})(?:{_HEX4}:){{1,6}}(?::{_HEX4}){{1,6}})(?![A-Za-z0-9_:])"),
    ("host-name", rf"(?<![A-Za-z0-9_.-])(?:(?:[A-Za-z0-9](?:[A-Za-z0-9-]{{0,61}}[A-Za-z0-9])?\.)+(?i:{_TLDS})"
                  rf"|(?:{_LOWER_LABEL}\.){{2,}}(?:{_COUNTRY_TLDS})"
                  rf"|(?:{_LOWER_LABEL}\.)+(?:{_SECOND_LEVEL})\.(?:{'|'.join(_NOT_HOST_TLDS)}))"
                  r"(?![A-Za-z0-9_-]|\.[A-Za-z0-9])"),
    # Home directories: the user's name and what they keep there. The path's tail stays, so a
    # warning's "/home/alice/.venv/…/torch/x.py:12" still says which file.
    ("home-path", rf"(?:{_HOME_ROOT}){_PATH_USER}|/root(?!{PATH_CHAR})"),
    # A cluster's per-user folder: its root stays (/scratch/[redacted]/run1), the user's name goes.
    ("per-user-path", rf"(?P<lead>{_PER_USER_ROOT}){_PATH_USER}"),
    # A Windows share (\\server\share, \\\\server\\share as JSON writes it, //server/share): the
    # server's and the share's names; the path in the share stays.
    ("unc-path", r"(?<![A-Za-z0-9_.:/\\])(?:\\{4}[A-Za-z0-9_.$-]+\\{2}|\\{2}[A-Za-z0-9_.$-]+\\"
                 r"|//[A-Za-z0-9_.$-]+/)[A-Za-z0-9_.$-]+"),
)
# What every match of each rule holds, as regexes (any one of them) over the text in lower case:
# a text none of them finds is left as it is without running the rules, which cost a try of
# every rule at every character (a trace of torch's emit_nvtx holds a long name per operator
# call). Each starts with a literal character: Redactor.texts looks for the ones that start
# with one character in one pass. tests/test_redaction.py checks each against text its rule matches.
TRIGGERS: dict[str, tuple[str, ...]] = {
    "undecodable-text": ("could not decode",),
    "private-key": ("-----begin ",),
    "authorization-header": ("authorization",),
    "secret-assignment": ("token", "key", "secret", "passw", "passp", "credential", "creds", "auth", "_pass",
                          "-pass", "_pwd", "-pwd", "aws_"),
    "bearer-token": ("bearer",),
    "basic-auth": ("basic",),
    "wandb-key": ("wandb login", "local-"),
    "jwt": ("eyj",),
    "hugging-face-token": ("hf_",),
    "github-token": ("gh[pousr]_", "github_pat_"),
    "api-key": ("sk-",),
    "google-api-key": ("aiza",),
    "slack-token": ("xox[abposr]-",),
    "aws-key-id": ("akia", "asia"),
    "vendor-token": _VENDOR_TRIGGERS,
    "url-user-info": ("://",),
    "email": ("@",),
    "user-at-host": ("@",),
    # a dotted quad has a dot before a digit; an IPv6 address three colons with hex digits between
    "ip-address": (r"\.[0-9]", ":[0-9a-f]*:[0-9a-f]*:"),
    "host-name": (rf"\.(?:{_TLDS})", rf"\.(?:{_COUNTRY_TLDS})", rf"\.(?:{_SECOND_LEVEL})\."),
    "home-path": ("/home/", "/users/", "/root", r":(?:\\{1,2}|/)users"),
    "per-user-path": ("/scratch", "/cscratch", "/user", "/homes/"),
    "unc-path": (r"\\\\", "//"),
}
# Public sites gemmscope's own output cites (devices.py's sources, the JSON schemas' $schema):
# not private, kept although the host-name rule matches them. `--keep` adds to these.
PUBLIC_HOSTS = ("nvidia.com", "*.nvidia.com", "json-schema.org", "github.com", "pytorch.org", "*.pytorch.org")

_USER_IN_PATH = re.compile(rf"(?:{_HOME_ROOT}|{_PER_USER_ROOT})(?P<user>{_PATH_USER})")


def path_user_names(text: str) -> list[str]:
    """The user names `text`'s paths hold where a home or per-user folder is named
    (/home/alice/x, /scratch/users/bob: alice, bob): a trace's recorded working directory and
    home say whose they are, and that name is then redacted wherever it stands."""
    return _USER_IN_PATH.findall(text)
