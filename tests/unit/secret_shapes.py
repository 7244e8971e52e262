"""A catalogue of credential shapes, written out by hand (from the vendors' documented formats and the
shapes detect-secrets' plugins look for), each holding the marker `zq7` so a test can look for any of it.
Each shape is planted in five forms: bare, quoted, braced, in a URL, in JSON."""

from __future__ import annotations

MARKER = "zq7"

SHAPES: dict[str, str] = {
    "env_db_password": "DB_PASSWORD=zq7pw1",
    "env_openai_key": "OPENAI_API_KEY=zq7key2",
    "client_secret": "client_secret=zq7cs3",
    "aws_secret_access_key": "aws_secret_access_key=zq7AWSsecret/4+x",
    "token_assign": "token=zq7tok5",
    "passwd_colon": "passwd: zq7pw6",
    "authorization_token": "Authorization: Token zq7tok7abc1",
    "url_user_password": "https://admin:zq7pw8@db.internal:5432/app",
    "cookie_header": "Cookie: session=zq7ck9; theme=dark",
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOzq7jwt10.zq7sig10abc",
    "github_token": "ghp_zq7GH11abcdefghijklmnopqrstuv",
    "slack_token": "xoxb-zq7-12345678901",
    "aws_access_key_id": "AKIAZQ7S3CRET0000013",
    "pem_header": "-----BEGIN RSA PRIVATE KEY----- MIIEzq7pem14",
    "email": "zq7mail15@example.com",
    "bearer": "Bearer zq7bearer16",
    "openai_sk": "sk-zq7openai17abc",
    "hf_token": "hf_zq7hf18abcdef",
    "api_key": "api_key=zq7ak19",
    "password": "password=zq7pw20",
    "basic_auth": "Basic emq7zq7YmFzaWM=",
    "x_api_key": "x-api-key: zq7xk22",
    "set_cookie": "Set-Cookie: sid=zq7sc23; HttpOnly",
    "github_pat": "github_pat_zq7GHPAT24_abcdefghijklmnop",
    "gitlab_pat": "glpat-zq7GL25abcdefghijklmnop",
    "stripe_live": "sk_live_zq7STRIPE26abcdefgh",
    "google_api_key": "AIzaZQ7google27abcdefghijklmnopqrstuvw",
    "npm_token": "npm_zq7NPM28abcdefghijklmnopqrstuvwxyz0123",
    "session_id": "session_id=zq7sess29",
    "url_token_user": "https://zq7ghp30tokenuser@github.com/org/repo.git",
    "private_key_assign": "private_key=zq7pk31",
    "database_url": "DATABASE_URL=postgres://app:zq7pg32@db:5432/x",
}

FORMS: dict[str, str] = {
    "bare": "{s}",
    "parenthesised": "(config {s})",
    "single_quoted": "'{s}'",
    "double_quoted": '"{s}"',
    "braced": "{{{s}}}",
    "in_url_query": "https://api.example.com/v1/x?{s}",
    "in_url_path": "https://api.example.com/{s}/v1",
    "in_json": '{{"cfg": "{s}", "n": 1}}',
}

PATH_SAFE = {name: s for name, s in SHAPES.items() if " " not in s and "/" not in s and ";" not in s}


def planted(shape: str, form: str) -> str:
    return FORMS[form].format(s=SHAPES[shape])


def leaks(text: str) -> bool:
    return MARKER in text.lower()
