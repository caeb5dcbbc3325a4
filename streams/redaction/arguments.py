"""Secrets that a call, a URL or a sentence holds without any name beside them (policy 2.12).

A seventh adversarial round found these kept under 2.11: the library calls whose arguments are a
user and a password or a signing key (``server.login(user, "PW")``, ``NetworkCredential("bob",
"PW")``, ``jwt.encode(payload, "KEY")``, ``Fernet(b"KEY")``), pexpect answering a password prompt,
URL fragments and paths that are keys (MEGA and PrivateBin links, Mattermost and IFTTT webhooks,
an Azure Functions ``?code=``), Apple and Google app passwords (four groups of four small
letters, which no "looks random" reading takes), an Azure DevOps ``…_PAT=`` variable, and a key
echoed through ``base64 -d`` into a key file. Each reading starts at a literal of its own.
"""

from __future__ import annotations

import re

from streams.redaction.base import RegexRule
from streams.redaction.entropy import looks_random
from streams.redaction.keys import is_placeholder, name_class

__all__ = ["ARGUMENT_RULES"]


def _quoted_value(match: re.Match[str]) -> bool:
    value = match.group("value")
    return len(value) >= 6 and not is_placeholder(value, quoted=True)


def _random_value(match: re.Match[str]) -> bool:
    return looks_random(match.group("value"))


def _key_value(match: re.Match[str]) -> bool:
    # A signing key literal is a secret whatever its shape, but not a placeholder or a word alone
    # ("secret", "changeme" are placeholders too short to matter: six characters at least).
    value = match.group("value")
    return len(value) >= 8 and not is_placeholder(value, quoted=True) and not value.isalpha()


_PASSWORD_FIELD = re.compile(r"['\"][^'\"\r\n]{0,128}(?:passw|pwd|passphrase)[^'\"\r\n]{0,128}['\"]", re.ASCII | re.IGNORECASE)


def _typed_password(match: re.Match[str]) -> bool:
    """The field typed into names a password: in the call's own selector (page.fill('#password', X))
    or in the chain before it on its line (cy.get('#password').type(X))."""
    if not _quoted_value(match) or any(c.isspace() for c in match.group("value")):
        return False
    selector = match.group("selector")
    if selector is not None:
        return _PASSWORD_FIELD.search(f"'{selector}'") is not None
    line_start = match.string.rfind("\n", 0, match.start()) + 1
    return _PASSWORD_FIELD.search(match.string, max(line_start, match.start() - 200), match.start()) is not None


def _method_password(match: re.Match[str]) -> bool:
    return _quoted_value(match) and not any(c.isspace() for c in match.group("value"))


_Q = r"b?(?P<q>['\"])"  # a Python bytes literal's b too: Fernet(b'…'), hmac.new(b"…", …)
_CALLS = (
    # smtplib / imaplib / ftplib / poplib's login(user, password), .NET's NetworkCredential and
    # Java's credential classes: the second argument is the password.
    # 2.18: MongoDB's db.auth(USER, "PASSWORD") too.
    RegexRule(name="password-assignment", lower_triggers=(".login(", ".auth(", "credential(", "credentials(", "authentication("),
              group="value", check=_quoted_value,
              description="login(USER, \"PASSWORD\") / NetworkCredential(USER, \"PASSWORD\") / "
                          "UsernamePasswordCredentials / PasswordAuthentication (2.12)",
              pattern=re.compile(r"(?:\.login|\.auth|(?:Network|UsernamePassword|Password|Basic)Credentials?|PasswordAuthentication)"
                                 r"\([ \t]*[^,()\r\n]{1,128},[ \t]*" + _Q + r"(?P<value>[^'\"\r\n]{1,256})(?P=q)[ \t]*[,)]",
                                 re.ASCII | re.IGNORECASE)),
    # ftplib.FTP(host, user, password): the third argument.
    RegexRule(name="password-assignment", triggers=("FTP(", "FTP_TLS("), group="value", check=_quoted_value,
              description="ftplib.FTP(HOST, USER, \"PASSWORD\") (2.12)",
              pattern=re.compile(r"\bFTP(?:_TLS)?\([ \t]*[^,()\r\n]{1,128},[ \t]*[^,()\r\n]{1,128},[ \t]*"
                                 + _Q + r"(?P<value>[^'\"\r\n]{1,256})(?P=q)", re.ASCII)),
    # 2.15: a database client's connect call whose third argument is the password: PHP's new PDO(DSN,
    # USER, PW) / mysqli, JDBC's DriverManager.getConnection(URL, USER, PW), Perl's DBI->connect.
    RegexRule(name="password-assignment", lower_triggers=("pdo(", "getconnection(", "dbi->connect(", "mysqli(", "mysqli_connect(",
                                                          "mysql_connect("),
              anchored=True, group="value", check=_quoted_value,
              description="new PDO / mysqli / DriverManager.getConnection / DBI->connect(DSN, USER, \"PASSWORD\") (2.15)",
              pattern=re.compile(r"(?:pdo|getconnection|dbi->connect|mysqli|mysqli_connect|mysql_connect)\([ \t]*[^,()\r\n]{1,256},"
                                 r"[ \t]*[^,()\r\n]{1,128},[ \t]*" + _Q + r"(?P<value>[^'\"\r\n]{1,256})(?P=q)",
                                 re.ASCII | re.IGNORECASE)),
    # 2.15: browser automation typing into a password field: Cypress cy.get('#password').type('X'),
    # Selenium find_element(By.ID, "password").send_keys("X"), Playwright getByLabel('Password')
    # .fill('X') and page.fill('#password', 'X'): a selector or label naming a password before it.
    RegexRule(name="password-assignment", lower_triggers=(".type(", ".fill(", ".send_keys(", ".sendkeys(", ".setvalue(",
                                                          ".presssequentially("),
              anchored=True, group="value", check=_typed_password,
              description="browser automation typing a literal into a password field: .type / .fill / send_keys (2.15)",
              pattern=re.compile(r"\.(?:type|fill|send_keys|sendkeys|setvalue|presssequentially)\([ \t]*"
                                 r"(?:(?P<sq>['\"])(?P<selector>[^'\"\r\n]{1,128})(?P=sq)[ \t]*,[ \t]*)?"
                                 + _Q + r"(?P<value>[^'\"\r\n]{1,256})(?P=q)", re.ASCII | re.IGNORECASE)),
    # 2.15: a builder's or setter's password method with a literal: PgConnectOptions::new()
    # .password("X"), setPassword("X"), withPassword("X"); a random literal under a token / secret /
    # API key method.
    RegexRule(name="password-assignment", lower_triggers=("password(", "passwd(", "passphrase("), group="value",
              check=_method_password,
              description=".password(\"X\") / setPassword(\"X\") / withPassword(\"X\") (2.15)",
              pattern=re.compile(r"\.(?:set|with)?(?:password|passwd|passphrase)\([ \t]*" + _Q + r"(?P<value>[^'\"\r\n]{1,256})(?P=q)[ \t]*\)",
                                 re.ASCII | re.IGNORECASE)),
    RegexRule(name="secret-assignment", lower_triggers=("secret(", "token(", "apikey(", "api_key("), group="value",
              check=_random_value,
              description=".token(\"X\") / setApiKey(\"X\") / withClientSecret(\"X\") of a random literal (2.15)",
              pattern=re.compile(r"\.(?:set|with)?(?:client_?)?(?:secret|token|api_?key)\([ \t]*" + _Q + r"(?P<value>[^'\"\r\n]{1,256})(?P=q)[ \t]*\)",
                                 re.ASCII | re.IGNORECASE)),
    # A signing or encryption key written into the call that uses it: PyJWT / jsonwebtoken's
    # encode / decode / sign / verify(payload, KEY), hmac.new(KEY, …), crypto.createHmac(ALG, KEY),
    # Fernet(KEY). A variable (SECRET_KEY, settings.X) is no literal and stays.
    RegexRule(name="secret-assignment", lower_triggers=("jwt.", "hmac", "fernet("), anchored=True, group="value",
              check=_key_value,
              description="a literal key in jwt.encode / decode / sign / verify, hmac.new, createHmac, Fernet (2.12)",
              pattern=re.compile(r"(?:jwt\.(?:encode|decode|sign|verify)\([ \t]*[^,()\r\n]{1,128},"
                                 r"|hmac\.new\(|createhmac\([ \t]*['\"][A-Za-z0-9-]{2,16}['\"][ \t]*,|fernet\()[ \t]*"
                                 + _Q + r"(?P<value>[^'\"\r\n]{1,512})(?P=q)", re.ASCII | re.IGNORECASE)),
    # pexpect / expect-like scripts in Python: child.sendline('PW') right after an expect of a
    # password prompt (expect's own `send "PW\r"` is cli-password's).
    RegexRule(name="password-assignment", lower_triggers=("expect",), anchored=True, group="value", check=_quoted_value,
              description="pexpect: sendline(\"PASSWORD\") after expect(\"Password:\") (2.12)",
              pattern=re.compile(r"expect(?:_exact)?\([^\r\n]{0,80}?(?:assword|assphrase)[^\r\n]{0,80}\)[ \t]*\r?\n[ \t]*"
                                 r"[A-Za-z_][\w.]{0,64}\.send(?:line)?\([ \t]*" + _Q + r"(?P<value>[^'\"\r\n]{1,256})(?P=q)",
                                 re.ASCII | re.IGNORECASE)),
)

_URLS = (
    # A MEGA link's fragment is the file's decryption key (mega.nz/file/ID#KEY, the old #!ID!KEY),
    # a PrivateBin paste's (?PASTEID#KEY, base58) and a Bitwarden Send's (#/ID/KEY) too: whoever
    # has the fragment reads the file.
    RegexRule(name="url-token", lower_triggers=("mega.", "send.bitwarden"), group="value",
              description="the key in a MEGA or Bitwarden Send link's fragment (2.12)",
              pattern=re.compile(r"(?:mega\.(?:nz|co\.nz|io)/(?:file/|folder/|#F?!)[A-Za-z0-9_-]{6,16}[#!]"
                                 r"|send\.bitwarden\.com/#/?[A-Za-z0-9_-]{8,}/)(?P<value>[A-Za-z0-9_-]{16,})", re.ASCII)),
    RegexRule(name="url-token", triggers=("#",), group="value",
              description="the key in a PrivateBin link's fragment (?PASTEID#KEY) (2.12)",
              pattern=re.compile(r"\?[0-9a-f]{16}#(?P<value>[A-Za-z0-9]{32,})(?![A-Za-z0-9_-])", re.ASCII)),
    # Azure Functions' function key rides in the query as code= (no OAuth state= beside it);
    # Mattermost's incoming webhooks end in a 26-character key, IFTTT's Maker webhooks in the
    # account's key.
    RegexRule(name="url-token", lower_triggers=("azurewebsites.net",), group="value",
              description="an Azure Functions key (?code=) in a URL of azurewebsites.net (2.12)",
              pattern=re.compile(r"\.azurewebsites\.net/[^\s?#\"'<>]*\?(?:[^\s#&\"'<>]*&)*code=(?P<value>[A-Za-z0-9_%=/+-]{20,})",
                                 re.ASCII | re.IGNORECASE)),
    RegexRule(name="url-token", triggers=("/hooks/",), group="value",
              description="a Mattermost incoming webhook's key (/hooks/ + 26 letters and digits) (2.12)",
              pattern=re.compile(r"/hooks/(?P<value>(?=[a-z]*[0-9])[a-z0-9]{26})(?![A-Za-z0-9_-])", re.ASCII)),
    RegexRule(name="url-token", lower_triggers=("ifttt.com",), group="value",
              description="an IFTTT Maker webhook key (2.12)",
              pattern=re.compile(r"ifttt\.com/(?:trigger/[^/\s]{1,128}/(?:json/)?with/key|use)/(?P<value>[A-Za-z0-9_-]{16,})",
                                 re.ASCII | re.IGNORECASE)),
)

_WORDS = (
    # Apple's app-specific passwords and Google's app passwords: four groups of four small letters
    # (xxxx-xxxx-xxxx-xxxx, or spaces between), after a word naming one.
    RegexRule(name="secret-in-prose", lower_triggers=("app password", "app-password", "app_password", "app-specific", "app specific",
                                                      "application-specific", "application_specific", "application specific"),
              anchored=True, group="value",
              description="an Apple app-specific or Google app password (four groups of four letters) after its name (2.12)",
              pattern=re.compile(r"app(?:lication)?[ _-](?:specific[ _-])?password[^\r\n]{0,40}?"
                                 r"(?<![a-z])(?P<value>[a-z]{4}(?P<sep>[ -])[a-z]{4}(?P=sep)[a-z]{4}(?P=sep)[a-z]{4})(?![a-z])",
                                 re.ASCII | re.IGNORECASE)),
    # Azure DevOps personal access tokens (52 small letters and digits) under *_PAT names
    # (AZURE_DEVOPS_EXT_PAT, ADO_PAT, GITHUB_PAT): "pat" alone is too common a syllable to be a
    # secret word, "_PAT" in capitals is not.
    RegexRule(name="secret-assignment", triggers=("_PAT",), group="value", check=_random_value,
              description="a random value of a *_PAT variable (personal access token) (2.12)",
              pattern=re.compile(r"\b[A-Z][A-Z0-9_]{0,48}_PAT[ \t]*(?::=|=|:)[ \t]*['\"]?(?P<value>[A-Za-z0-9_.~+/=-]{16,})", re.ASCII)),
    # A key decoded into a key or secret file: echo 'BASE64' | base64 -d > ~/.ssh/id_ed25519.
    RegexRule(name="private-key", lower_triggers=("base64",), group="value",
              description="base64 echoed through base64 -d into a key or secret file (2.12)",
              pattern=re.compile(r"\becho(?:[ \t]+-[neE]+)*[ \t]+(?P<q>['\"]?)(?P<value>[A-Za-z0-9+/=_-]{16,})(?P=q)[ \t]*\|[ \t]*"
                                 r"base64[ \t]+(?:-d|--decode|-D)\b[^\r\n|;&]*>[ \t]*[^\s|;&]*"
                                 r"(?:id_(?:rsa|dsa|ecdsa|ed25519)|\.pem|\.key|\.p12|\.pfx|\.jks|keystore|secret|token|credential)",
                                 re.ASCII | re.IGNORECASE)),
)



def _password_name(match: re.Match[str]) -> bool:
    return name_class(match.group("name")) == "password" and _quoted_value(match)


# Groovy's and Gradle's method-call syntax sets a property without "=": an Android signing
# config's `storePassword 'X'` / `keyPassword "X"`, alone on its line.
_GROOVY = RegexRule(name="password-assignment", lower_triggers=("password ",), group="value", check=_password_name,
                    description="NAME 'PASSWORD' alone on its line (Groovy / Gradle: storePassword, keyPassword) (2.12)",
                    pattern=re.compile(r"^[ \t]*(?P<name>[A-Za-z_][A-Za-z0-9_]{0,48}[Pp]assword)[ \t]+(?P<q>['\"])"
                                       r"(?P<value>[^'\"\r\n]{1,256})(?P=q)[ \t]*;?[ \t]*\r?$", re.ASCII | re.MULTILINE))



def _hex_key(match: re.Match[str]) -> bool:
    value = match.group("value")
    return any(c.isdigit() for c in value) and any(c.isalpha() for c in value)


def _bootstrap_token(match: re.Match[str]) -> bool:
    return any(c.isdigit() for c in match.group("value"))


# A generated password Terraform keeps in its state: random_password's and random_string's
# "result", beside the options that shaped it ("special", "min_upper", "bcrypt_hash"). "result"
# is no secret word; the resource says what it is.
_RANDOM_RESOURCE = re.compile(r"\"(?:override_special|min_special|min_upper|min_numeric|bcrypt_hash|special)\"[ \t]*:|random_(?:password|string)",
                              re.ASCII)


def _random_result(match: re.Match[str]) -> bool:
    value, text = match.group("value"), match.string
    return (len(value) >= 8 and not is_placeholder(value, quoted=True)
            and _RANDOM_RESOURCE.search(text, max(0, match.start() - 600), match.end() + 600) is not None)


# Credentials that config files and the calls that read them hold without a secret-like name (2.17).
_CONFIGS = (
    # A Kubernetes bootstrap token (kubeadm's [a-z0-9]{6}.[a-z0-9]{16}) under a token key or flag:
    # a kubeconfig's `token: abcdef.0123456789abcdef`, `kubeadm join --token …`. Its 22 characters
    # and dot score below the entropy a token's value needs.
    RegexRule(name="secret-assignment", lower_triggers=("token",), group="value", check=_bootstrap_token,
              description="a Kubernetes bootstrap token ([a-z0-9]{6}.[a-z0-9]{16}) under a token key or flag (2.17)",
              pattern=re.compile(r"(?i:token)['\"]?[ \t]*(?:[:=]|[ \t])[ \t]*['\"]?(?P<value>[a-z0-9]{6}\.[a-z0-9]{16})(?![A-Za-z0-9._-])",
                                 re.ASCII)),
    # Search and analytics clients built from a literal key: algoliasearch(APP_ID, KEY) (an admin
    # key where the server writes an index), Segment's and RudderStack's analytics.load(WRITE_KEY).
    RegexRule(name="secret-assignment", lower_triggers=("algoliasearch(",), group="value", check=_hex_key,
              description="algoliasearch(APP_ID, KEY): the 32 hex digits of the key (2.17)",
              pattern=re.compile(r"algoliasearch\([ \t]*['\"][A-Za-z0-9]{6,16}['\"][ \t]*,[ \t]*['\"](?P<value>[a-fA-F0-9]{32})['\"]",
                                 re.ASCII | re.IGNORECASE)),
    RegexRule(name="secret-assignment", lower_triggers=("analytics.load(",), group="value", check=_random_value,
              description="analytics.load(WRITE_KEY) of Segment and RudderStack: a random literal (2.17)",
              pattern=re.compile(r"analytics\.load\([ \t]*['\"](?P<value>[A-Za-z0-9]{16,64})['\"]", re.ASCII | re.IGNORECASE)),
    RegexRule(name="secret-assignment", triggers=('"result"',), group="value", check=_random_result,
              description="the \"result\" of Terraform's random_password / random_string in a state file (2.17)",
              pattern=re.compile(r"\"result\"[ \t]*:[ \t]*\"(?P<value>[^\"\r\n]{1,512})\"", re.ASCII)),
)

ARGUMENT_RULES: tuple[RegexRule, ...] = (*_CALLS, *_URLS, *_WORDS, _GROOVY, *_CONFIGS)
