# Sourced by scripts/test.sh (the full run): the machine packages the suite reads, and the offline
# embedding model. Why here and not in CI only: the README's test command must work on a fresh machine,
# and under RAGSYNC_REQUIRE_SERVICES=1 a missing package is a failed test, not a skip.

# The evaluation gates read HTML manuals from Debian documentation packages: the Python 3.11 manual
# (Sphinx), the Git manual (AsciiDoc) and the flex manual (Texinfo). The eval/ sets pin the version
# their questions were written against; if the mirror has moved on, the current one is installed and
# each set's gold verifier decides whether its questions still hold.
install_doc() {  # install_doc <path the package installs> <package> [<pinned version>]
    [ -e "$1" ] && return 0  # a directory, or a file where the directory is shared with another package
    local want="$2${3:+=$3}"
    apt-get install -y -q --no-install-recommends "$want" >/dev/null 2>&1 \
        || { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends "$want" >/dev/null 2>&1; } \
        || apt-get install -y -q --no-install-recommends "$2" >/dev/null \
        || { echo "could not install Debian package $2 (apt-get needs root): the tests read $1" >&2; return 1; }
}
install_doc /usr/share/doc/python3.11/html python3.11-doc
install_doc /usr/share/doc/git-doc git-doc 1:2.39.5-0+deb12u3
install_doc /usr/share/doc/flex-doc/html flex-doc 2.6.4-8.2
# The two later sets, and the tests that read their pages (tests/test_html_extraction.py reads the
# handbook's Publican sidebars, tests/test_restated.py the SQLite FAQ): Debian's debian-handbook
# (Publican over DocBook) and sqlite3-doc, pinned as eval/debian-handbook and eval/sqlite-doc say.
install_doc /usr/share/doc/debian-handbook/html/en-US debian-handbook 11.20220922
install_doc /usr/share/doc/sqlite3/faq.html sqlite3-doc 3.40.1-2+deb12u2

# The console and /docs tests (tests/test_console.py) drive Debian's headless Chromium with Selenium
# (no browser download); under RAGSYNC_REQUIRE_SERVICES=1 a missing browser fails them.
install_doc /usr/share/doc/chromium chromium
install_doc /usr/share/doc/chromium-driver chromium-driver

# POSIX permissions (tests/test_posix_permissions.py, bench/source_permissions.py) are set with
# setfacl/getfacl from Debian's acl package; under RAGSYNC_REQUIRE_SERVICES=1 a missing one fails CI.
install_doc /usr/share/doc/acl acl
command -v setfacl >/dev/null || { echo "setfacl missing after installing Debian's acl" >&2; exit 1; }

# The DokuWiki source tests (tests/test_dokuwiki_source.py) start Debian's dokuwiki under PHP's built-in
# server (compose/local/services up dokuwiki): the wiki, php-cli and php-xml (its XML-RPC API).
install_doc /usr/share/dokuwiki dokuwiki
install_doc /usr/share/doc/php-cli php-cli
install_doc /usr/share/doc/php-xml php-xml

# The offline all-MiniLM-L6-v2 export: wherever this clone sits, find the machine's shared copy
# (beside the checkout, above it, or the workplace's /work/shared) so dense retrieval is tested.
if [ -z "${RAGSYNC_EMBED_MODEL_PATH:-}" ]; then
    for dir in "$PWD/../shared" "$PWD/../../shared" /work/shared; do
        if [ -f "$dir/models/all-MiniLM-L6-v2-onnx/model.onnx" ]; then
            RAGSYNC_EMBED_MODEL_PATH="$(cd "$dir/models/all-MiniLM-L6-v2-onnx" && pwd)"
            export RAGSYNC_EMBED_MODEL_PATH
            break
        fi
    done
fi
