"""png_colors.py PNG HEX... — decodes an 8-bit RGB/RGBA PNG (no libraries:
zlib + the five row filters) and prints JSON: width, height, and for each
colour asked the share of pixels within 12 of it per channel (every
4th pixel of every row: pure Python is slow).  The chat
page test (t_page.sh) checks its headless-Chromium screenshot with it."""
import json, struct, sys, zlib

def decode(path):
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, w = 8, b"", None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, ctype = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and ctype in (2, 6), f"depth {depth} colour type {ctype}"
            bpp = 3 if ctype == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw, stride, rows, prev = zlib.decompress(idat), w * bpp, [], bytearray(w * bpp)
    for y in range(h):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if f == 1: line[i] = (line[i] + a) & 255
            elif f == 2: line[i] = (line[i] + b) & 255
            elif f == 3: line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c; pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(line); prev = line
    return w, h, bpp, rows

w, h, bpp, rows = decode(sys.argv[1])
want = [tuple(int(x[i:i + 2], 16) for i in (0, 2, 4)) for x in sys.argv[2:]]
count = [0] * len(want)
for line in rows:
    for x in range(0, w * bpp, 4 * bpp):
        px = line[x:x + 3]
        for k, c in enumerate(want):
            if abs(px[0] - c[0]) <= 12 and abs(px[1] - c[1]) <= 12 and abs(px[2] - c[2]) <= 12: count[k] += 1
print(json.dumps({"width": w, "height": h, "share": {sys.argv[2 + k]: count[k] / (h * len(range(0, w, 4))) for k in range(len(want))}}))
