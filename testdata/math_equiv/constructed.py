r"""Pairs written for the corpus, labelled by hand: positives and hard negatives of every class.

A table row is ``gold ;; answer ;; T|F|A`` (A: ambiguous, followed by ``;; note``). Answers of the answer-level
classes are wrapped into two completion styles (a boxed sentence and a Minerva "Final Answer" line), since the
verdict must not depend on how the answer is delivered; completions of the extraction classes are written whole.
Exact values of huge numbers are computed here, not typed.
"""

from __future__ import annotations

import math
from fractions import Fraction

WRAPS = (
    ("b", "We simplify step by step and check the result.\n\nTherefore, the answer is $\\boxed{{{a}}}$."),
    ("m", "Combining the cases above gives the result.\nFinal Answer: The final answer is ${a}$. I hope it is correct."),
)

SIG_DIGITS = r"""
6.12\times10^{-8} ;; 6.12 \times 10^{-8} ;; T
6.12\times 10^{-8} ;; 6.12e-8 ;; T
6.12\times10^{-8} ;; 0.0000000612 ;; T
1.6\times10^{-19} ;; 1.60\times10^{-19} ;; T
2.5\times10^{6} ;; 2500000 ;; T
\frac{1}{3} ;; 0.333333 ;; T
\frac{2}{3} ;; 0.666667 ;; T
\frac{1}{7} ;; 0.142857 ;; T
3.0\times10^{8} ;; 3\times10^8 ;; T
6.022\times10^{23} ;; 6.022e23 ;; T
0.000123 ;; 1.23\times10^{-4} ;; T
9.81 ;; 9.810 ;; T
1.5e-10 ;; 1.5\times 10^{-10} ;; T
4.56\times10^{-12} ;; 4.56 \cdot 10^{-12} ;; T
7.2\times10^{-9} ;; 0.0000000072 ;; T
1.2\times10^{-5} ;; 0.000012 ;; T
8.99\times10^{9} ;; 8.99e9 ;; T
1.0\times10^{-3} ;; 0.001 ;; T
0.5 ;; 0.50 ;; T
2.718281828 ;; 2.718281828 ;; T
6.12\times10^{-8} ;; 6.17\times10^{-8} ;; F
6.12e-8 ;; 6.17e-8 ;; F
1.6\times10^{-19} ;; 1.7\times10^{-19} ;; F
4.2\times10^{-7} ;; 4.3\times10^{-7} ;; F
0.000123 ;; 0.000124 ;; F
2.5\times10^{6} ;; 2.6\times10^{6} ;; F
1.5e-10 ;; 1.5e-11 ;; F
6.022\times10^{23} ;; 6.023\times10^{23} ;; F
7.2\times10^{-9} ;; 7.2\times10^{-8} ;; F
3.0\times10^{-7} ;; 3.0\times10^{-6} ;; F
5\times10^{-9} ;; 6\times10^{-9} ;; F
2.0\times10^{-8} ;; 0 ;; F
0.0000001 ;; 0.0000002 ;; F
8.99\times10^{9} ;; 8.98\times10^{9} ;; F
1.0\times10^{-3} ;; 0.01 ;; F
\frac{1}{3} ;; 0.3 ;; F
123456789 ;; 123456788 ;; F
3.14159 ;; 3.14158 ;; F
1.00001 ;; 1.00002 ;; F
9.11\times10^{-31} ;; 9.11\times10^{-30} ;; F
\frac{1}{3} ;; 0.3333 ;; A ;; four significant digits for 1/3: accepted when the problem asks for a decimal
\frac{70}{9} ;; 7.78 ;; A ;; rounded to cents: accepted when the problem asks for a rounded value
"""

FREE_SYMBOLS = r"""
\frac{9}{2}t ;; \frac{9t}{2} ;; T
\frac{9}{2}t ;; 4.5t ;; T
3x ;; x\cdot 3 ;; T
2\pi r ;; 2r\pi ;; T
x^2-1 ;; (x-1)(x+1) ;; T
\frac{n(n+1)}{2} ;; \frac{n^2+n}{2} ;; T
\frac{a}{b} ;; a/b ;; T
2^{n+1} ;; 2\cdot 2^n ;; T
ab ;; ba ;; T
(x+1)^2 ;; x^2+2x+1 ;; T
\frac{x}{2} ;; 0.5x ;; T
t^2-4t+4 ;; (t-2)^2 ;; T
2xy ;; 2yx ;; T
\pi r^2 ;; r^2\pi ;; T
\frac{9}{2} ;; \frac{9}{2}t ;; F
\frac{9}{2}t ;; \frac{9}{2} ;; F
3x ;; 3 ;; F
3 ;; 3x ;; F
2\pi r ;; 2\pi ;; F
x^2+1 ;; x^2+1+y ;; F
4t-1 ;; 4s-1 ;; F
\frac{a}{b} ;; \frac{b}{a} ;; F
\frac{n(n+1)}{2} ;; \frac{n(n-1)}{2} ;; F
2^n ;; 2n ;; F
\sqrt{x} ;; x ;; F
ab ;; a+b ;; F
5k ;; 5 ;; F
\pi ;; \pi r^2 ;; F
e^{x} ;; e^{-x} ;; F
4 ;; 4\sqrt{2} ;; F
"""

SUFFIX_WORDS = r"""
7 \text{ a.m.} ;; 7 \text{ a.m.} ;; T
7 \text{ a.m.} ;; 7\text{ am} ;; T
9 \text{ p.m.} ;; 9 \text{ PM} ;; T
5 \text{ km} ;; 5 \text{ km} ;; T
3 \text{ hours} ;; 3 ;; T
3 ;; 3 \text{ hours} ;; T
40 \text{ km/h} ;; 40 ;; T
\text{Monday} ;; \text{Monday} ;; T
6 \text{ feet} ;; 6\text{ ft} ;; T
11 \text{ p.m.} ;; 11\text{ pm} ;; T
7 \text{ a.m.} ;; 7 \text{ p.m.} ;; F
9 \text{ p.m.} ;; 9 \text{ a.m.} ;; F
10 \text{ AM} ;; 10 \text{ PM} ;; F
11 \text{ p.m.} ;; 11 \text{ a.m.} ;; F
\text{Monday} ;; \text{Tuesday} ;; F
3 \text{ hours} ;; 3 \text{ minutes} ;; F
5 \text{ km} ;; 5 \text{ m} ;; F
2 \text{ kg} ;; 2 \text{ g} ;; F
40 \text{ km/h} ;; 40 \text{ m/s} ;; F
6 \text{ feet} ;; 6 \text{ inches} ;; F
30 \text{ seconds} ;; 30 \text{ minutes} ;; F
5 \text{ dollars} ;; 5 \text{ cents} ;; F
\text{north} ;; \text{south} ;; F
2 \text{ million} ;; 2 ;; F
"""

SPELLINGS = r"""
\frac{\pi}{3} ;; pi/3 ;; T
3\pi ;; 3*pi ;; T
e^2+1 ;; exp(2) + 1 ;; T
\sqrt{5} ;; sqrt(5) ;; T
1 ;; e^{2\pi i} ;; T
-1+3i ;; i(3+i) ;; T
2-3i ;; 2.0 + -3.0i ;; T
\emptyset ;; \varnothing ;; T
\frac{1}{2} ;; \dfrac{1}{2} ;; T
(1,2) ;; \left(1,2\right) ;; T
2\sqrt{3} ;; 2 sqrt(3) ;; T
\frac{\sqrt{3}}{2} ;; \frac{\sqrt3}{2} ;; T
\frac{\pi^2}{6} ;; \pi^2/6 ;; T
\sqrt[3]{2} ;; 2^{1/3} ;; T
\pi ;; π ;; T
2\pi ;; 2π ;; T
\sqrt{2} ;; √2 ;; T
\frac{3}{4} ;; \tfrac34 ;; T
\frac{1}{4} ;; \left(\frac{1}{2}\right)^2 ;; T
\frac{\pi}{3} ;; \dfrac{\pi}{3} ;; T
\frac{\pi}{3} ;; pi/6 ;; F
3\pi ;; 3 ;; F
e^2+1 ;; exp(2) ;; F
\sqrt{5} ;; sqrt(6) ;; F
1 ;; e^{\pi i} ;; F
-1+3i ;; i(3-i) ;; F
2-3i ;; 2.0 + 3.0i ;; F
\emptyset ;; \{0\} ;; F
\frac{1}{2} ;; \dfrac{2}{1} ;; F
\sqrt[3]{2} ;; 2^{1/2} ;; F
i ;; -i ;; F
2\pi ;; \pi^2 ;; F
\sqrt{2} ;; 2 ;; F
\infty ;; -\infty ;; F
\frac{3}{4} ;; \tfrac43 ;; F
\pi ;; 3.14 ;; A ;; an approximation of pi: accepted only when the problem asks for a decimal
"""

EQUATIONS = r"""
g(t) = 4t - 1 ;; y = 4t - 1 ;; T
y = 2x+3 ;; 2x+3 ;; T
y = 2x+3 ;; y-2x=3 ;; T
x^2+y^2=25 ;; y^2+x^2=25 ;; T
k=4 ;; 4 ;; T
4 ;; k = 4 ;; T
4 ;; k = 2 + 2 = 4 ;; T
a = 3, b = 7 ;; a=3,b=7 ;; T
a = 3, b = 7 ;; b=7, a=3 ;; T
2, \frac{5}{3} ;; q=2 \text{ and } q=\frac{5}{3} ;; T
2,-2 ;; x = 2 \text{ or } x = -2 ;; T
\pm 2 ;; x = 2 \text{ or } x = -2 ;; T
1,2,3 ;; 1 \text{ and } 2 \text{ and } 3 ;; T
-3, 5 ;; x=-3 \quad x=5 ;; T
f(x) = x^2 ;; f(x)=x^{2} ;; T
a = 3, b = 7 ;; a=7,b=3 ;; F
2,-2 ;; x=2 ;; F
2 ;; x = 2 \text{ or } x = -2 ;; F
y=2x+3 ;; y=3x+2 ;; F
y=2x+3 ;; y=2x-3 ;; F
x^2+y^2=25 ;; x^2+y^2=5 ;; F
4 ;; k = 4 \text{ or } k = 5 ;; F
1,2,3 ;; 1,2 ;; F
x=1,y=2 ;; x=2,y=1 ;; F
2, \frac{5}{3} ;; q=2 \text{ and } q=\frac{3}{5} ;; F
g(t) = 4t - 1 ;; y = 4t + 1 ;; F
-3, 5 ;; x=3 \quad x=5 ;; F
"""

INTERVALS = r"""
(-1, \infty) ;; x > -1 ;; T
(0, 5] ;; 0 < x \le 5 ;; T
(-\infty, \sqrt{3}] ;; t \leq \sqrt{3} ;; T
[2,\infty) ;; x \geq 2 ;; T
(-\infty,3) ;; x<3 ;; T
[-2,7] ;; -2 \le x \le 7 ;; T
(1,4) ;; 1<x<4 ;; T
x > -1 ;; (-1,\infty) ;; T
x \ge 2 ;; [2, \infty) ;; T
(-\infty,-1)\cup(1,\infty) ;; (-\infty,-1)\cup(1,\infty) ;; T
[0,1) ;; [0, 1) ;; T
(-1, \infty) ;; x \ge -1 ;; F
(0, 5] ;; 0 \le x \le 5 ;; F
(0, 5] ;; 0<x<5 ;; F
[2,\infty) ;; x>2 ;; F
(-\infty,3) ;; x>3 ;; F
(-\infty,3) ;; x \le 3 ;; F
[-2,7] ;; -2<x<7 ;; F
(1,4) ;; 1 \le x < 4 ;; F
(-\infty, \sqrt{3}] ;; t < \sqrt{3} ;; F
x > -1 ;; (-\infty,-1) ;; F
[0,1) ;; [0,1] ;; F
"""

UNITS = r"""
36 ;; 36 \text{ m}^2 ;; T
36 \text{ m}^2 ;; 36 ;; T
8 ;; \$8 ;; T
\$8 ;; 8 ;; T
60^\circ ;; 60 ;; T
60 ;; 60^\circ ;; T
3:20 \text{ PM} ;; 15:20 ;; T
15:20 ;; 3:20 \text{ PM} ;; T
5 \text{ cm} ;; 5 ;; T
5 ;; 5\text{ cm} ;; T
12 \text{ apples} ;; 12 ;; T
\$1.50 ;; 1.5 ;; T
2 \text{ hours} ;; 2 ;; T
45 \text{ km/h} ;; 45 ;; T
0.3 ;; 30\% ;; T
10:30 ;; 10:30 ;; T
3:20 \text{ PM} ;; 3:20 \text{ AM} ;; F
15:20 ;; 3:20 \text{ AM} ;; F
36 ;; 37 \text{ m}^2 ;; F
8 ;; \$9 ;; F
60^\circ ;; 30^\circ ;; F
\$1.50 ;; 150 ;; F
100 \text{ ml} ;; 10 ;; F
5 ;; 6\text{ cm} ;; F
10:30 ;; 10:03 ;; F
12 \text{ apples} ;; 13 \text{ apples} ;; F
"""

EXPRESSIONS = r"""
784 ;; 2^4 7^2 ;; T
784 ;; 2^4 \cdot 7^2 ;; T
72 ;; 2^3 3^2 ;; T
75 ;; 3 \cdot 5^2 ;; T
5 ;; 2+3 ;; T
2.5 ;; \frac{10}{4} ;; T
25 ;; (2+3)^2 ;; T
120 ;; 5! ;; T
10 ;; \binom{5}{2} ;; T
4 ;; \sqrt{16} ;; T
15 ;; 3(4+1) ;; T
\begin{pmatrix}6 & 8 \\ 10 & 12\end{pmatrix} ;; \begin{pmatrix}1 & 2 \\ 3 & 4\end{pmatrix} + \begin{pmatrix}5 & 6 \\ 7 & 8\end{pmatrix} ;; T
\begin{pmatrix}\frac{1}{2} \\ \frac{1}{4}\end{pmatrix} ;; \begin{pmatrix}0.5 \\ 0.25\end{pmatrix} ;; T
\begin{pmatrix}\frac{1}{3} \\ \frac{2}{3}\end{pmatrix} ;; \begin{pmatrix}0.333333 \\ 0.666667\end{pmatrix} ;; T
\begin{pmatrix}2 & 0 \\ 0 & 2\end{pmatrix} ;; 2\begin{pmatrix}1 & 0 \\ 0 & 1\end{pmatrix} ;; T
\begin{pmatrix}1 & 2 \\ 3 & 4\end{pmatrix} ;; \begin{bmatrix}1 & 2 \\ 3 & 4\end{bmatrix} ;; T
784 ;; 2^4 + 7^2 ;; F
783 ;; 2^4 7^2 ;; F
15 ;; 3(4-1) ;; F
120 ;; 4! ;; F
10 ;; \binom{5}{3}+1 ;; F
\begin{pmatrix}6 & 8 \\ 10 & 12\end{pmatrix} ;; \begin{pmatrix}1 & 2 \\ 3 & 4\end{pmatrix} + \begin{pmatrix}5 & 6 \\ 7 & 9\end{pmatrix} ;; F
\begin{pmatrix}\frac{1}{2} \\ \frac{1}{4}\end{pmatrix} ;; \begin{pmatrix}0.5 \\ 0.2\end{pmatrix} ;; F
\begin{pmatrix}\frac{1}{3} \\ \frac{2}{3}\end{pmatrix} ;; \begin{pmatrix}0.3 \\ 0.7\end{pmatrix} ;; F
\begin{pmatrix}1 & 2 \\ 3 & 4\end{pmatrix} ;; \begin{pmatrix}1 & 3 \\ 2 & 4\end{pmatrix} ;; F
\begin{pmatrix}2 & 0 \\ 0 & 2\end{pmatrix} ;; 3\begin{pmatrix}1 & 0 \\ 0 & 1\end{pmatrix} ;; F
"""

SYMBOLIC_SLOW = r"""
\cosh(bx) ;; \frac{e^{bx}+e^{-bx}}{2} ;; T
\sinh(x) ;; \frac{e^x - e^{-x}}{2} ;; T
(x+1)(x+2)(x+3) ;; (x+3)(x+1)(x+2) ;; T
\sin^2 x + \cos^2 x ;; 1 ;; T
\frac{x^3-1}{x-1} ;; x^2+x+1 ;; T
(a+b)^5 ;; a^5+5a^4b+10a^3b^2+10a^2b^3+5ab^4+b^5 ;; T
\tan x ;; \frac{\sin x}{\cos x} ;; T
2\sin x\cos x ;; \sin 2x ;; T
e^{i\pi} ;; -1 ;; T
\frac{1}{x(x+1)} ;; \frac{1}{x}-\frac{1}{x+1} ;; T
(x-1)^{10} ;; (1-x)^{10} ;; T
\sqrt{12} ;; 2\sqrt{3} ;; T
\frac{\sqrt{6}+\sqrt{2}}{4} ;; \cos\frac{\pi}{12} ;; T
(2a+3b)(2a-3b) ;; 4a^2-9b^2 ;; T
\cosh(bx) ;; \frac{e^{bx}-e^{-bx}}{2} ;; F
(x+1)(x+2)(x+3) ;; (x+1)(x+2)(x+4) ;; F
\sin^2 x + \cos^2 x ;; 2 ;; F
(a+b)^5 ;; a^5+5a^4b+10a^3b^2+10a^2b^3+5ab^4+b^4 ;; F
2\sin x\cos x ;; \sin x ;; F
\frac{x^3-1}{x-1} ;; x^2+x-1 ;; F
\tan x ;; \frac{\cos x}{\sin x} ;; F
(x-1)^{10} ;; (x+1)^{10} ;; F
\sqrt{12} ;; 3\sqrt{2} ;; F
(2a+3b)(2a-3b) ;; 4a^2+9b^2 ;; F
"""

THOUSANDS = r"""
12350 ;; 12,350 ;; T
12,350 ;; 12350 ;; T
1234567 ;; 1,234,567 ;; T
5040 ;; 5,040 ;; T
5,040 ;; 5040 ;; T
1000000 ;; 1,000,000 ;; T
100,000 ;; 100000 ;; T
3,-4 ;; 3,-4 ;; T
3, 4 ;; 3,4 ;; T
-4, 3 ;; 3,-4 ;; A ;; an unbracketed pair of values: a list of roots (any order) or coordinates
1, 2 ;; 1,2 ;; T
12350 ;; 12{,}350 ;; T
12350 ;; 12,305 ;; F
3,4 ;; 34 ;; F
34 ;; 3,4 ;; F
5040 ;; 5,04 ;; F
5040 ;; 50,40 ;; F
1234567 ;; 1,234,576 ;; F
3,-4 ;; 3,4 ;; F
1000000 ;; 1,000 ;; F
"""

PLAIN = r"""
\text{(C)} ;; C ;; T
\text{C} ;; (C) ;; T
\text{B} ;; \text{(C)} ;; F
\text{Evelyn} ;; Evelyn ;; T
\text{Evelyn} ;; \text{Briana} ;; F
\text{yes} ;; \text{Yes} ;; T
\text{no} ;; \text{yes} ;; F
25\% ;; 25 ;; T
25\% ;; 0.25 ;; T
25\% ;; 2.5 ;; F
0.25 ;; 25 ;; F
\{1,2,3\} ;; \{3,2,1\} ;; T
\{1,2,3\} ;; \{1,2\} ;; F
(2,-1) ;; (2,-1) ;; T
(2,-1) ;; (-1,2) ;; F
"""


EQUATION_SIDES = r"""
\sin(x)=\frac{42}{59} ;; \sin x=\frac{42}{59} ;; T
\sin(x)=\frac{42}{59} ;; \frac{42}{59} ;; T
\sin(x)=\frac{42}{59} ;; \cos(x)=\frac{42}{59} ;; F
\cos(x)=\frac{42}{59} ;; \sin(x)=\frac{42}{59} ;; F
\tan\theta=\frac{3}{4} ;; \tan\theta=0.75 ;; T
\tan\theta=\frac{3}{4} ;; \cot\theta=\frac{3}{4} ;; F
x=3 ;; 3 ;; T
3 ;; x=3 ;; T
x=3 ;; 2x=6 ;; T
2x=6 ;; x=3 ;; T
x=3 ;; y=3 ;; F
y=3 ;; x=3 ;; F
x=3 ;; 2x=7 ;; F
x=3 ;; x^2=9 ;; F
x^2=4 ;; x=2 ;; F
a=5 ;; b=5 ;; F
n=12 ;; m=12 ;; F
t=\frac{1}{2} ;; s=\frac{1}{2} ;; F
\theta=\frac{\pi}{6} ;; \frac{\pi}{6} ;; T
\theta=\frac{\pi}{6} ;; \alpha=\frac{\pi}{6} ;; F
y=2x+1 ;; y-1=2x ;; T
y=2x+1 ;; 2x-y+1=0 ;; T
y=2x+1 ;; 2x-y-1=0 ;; F
y=2x+1 ;; x=2y+1 ;; F
x+y=5 ;; y+x=5 ;; T
x+y=5 ;; x-y=5 ;; F
3x+2y=6 ;; y=3-\frac{3}{2}x ;; T
3x+2y=6 ;; y=3-\frac{2}{3}x ;; F
x=1, y=2 ;; 1, 2 ;; T
a=1, b=2 ;; x=1, y=2 ;; F
"""

BOUND_INDICES = r"""
F_n=\sum_{k=0}^{n-1}F_kF_{n-k-1} ;; F_n=\sum_{k=0}^{n-1}F_{n-k-1}F_k ;; T
F_n=\sum_{k=0}^{n-1}F_kF_{n-k-1} ;; F_n=\sum_{k=1}^{n}F_{k-1}F_{n-k} ;; T
F_n=\sum_{k=0}^{n-1}F_kF_{n-k-1} ;; F_n=\sum_{k=0}^{n-2}F_kF_{n-k-2} ;; F
F_n=\sum_{k=0}^{n-1}F_kF_{n-k-1} ;; F_n=\sum_{k=0}^{n-1}F_kF_{n-k} ;; F
\sum_{k=1}^{n}k ;; \frac{n(n+1)}{2} ;; T
\sum_{k=1}^{n}k ;; \frac{n(n-1)}{2} ;; F
\sum_{k=1}^{n}k^2 ;; \frac{n(n+1)(2n+1)}{6} ;; T
\sum_{k=1}^{n}k^2 ;; \frac{n(n+1)(2n-1)}{6} ;; F
\sum_{k=1}^{n}(2k-1) ;; n^2 ;; T
\sum_{k=1}^{n}(2k-1) ;; n^2+1 ;; F
\sum_{k=0}^{n}\binom{n}{k} ;; 2^n ;; T
\sum_{k=0}^{n}\binom{n}{k} ;; 2^{n+1} ;; F
\sum_{k=1}^{n}\frac{1}{k(k+1)} ;; \frac{n}{n+1} ;; T
\sum_{k=1}^{n}\frac{1}{k(k+1)} ;; \frac{1}{n+1} ;; F
\sum_{k=0}^{n}x^k ;; \frac{x^{n+1}-1}{x-1} ;; T
\sum_{k=0}^{n}x^k ;; \frac{x^{n}-1}{x-1} ;; F
\prod_{k=1}^{n}k ;; n! ;; T
\prod_{k=1}^{n}k ;; (n-1)! ;; F
\prod_{k=1}^{n}\frac{k+1}{k} ;; n+1 ;; T
\prod_{k=1}^{n}\frac{k+1}{k} ;; n ;; F
\sum_{i=1}^{n}\sum_{j=1}^{i}1 ;; \frac{n(n+1)}{2} ;; T
\sum_{i=1}^{n}\sum_{j=1}^{i}1 ;; \frac{n(n-1)}{2} ;; F
\sum_{k=1}^{n}a_k ;; \sum_{j=1}^{n}a_j ;; T
\sum_{k=1}^{n}a_k ;; \sum_{j=0}^{n}a_j ;; F
a_n=a_{n-1}+a_{n-2} ;; a_n=a_{n-2}+a_{n-1} ;; T
a_n=a_{n-1}+a_{n-2} ;; a_n=a_{n-1}+a_{n-3} ;; F
a_n=2a_{n-1}+1 ;; a_n=2a_{n-1}-1 ;; F
"""

LOG_BASE = r"""
3 ;; \log_2 8 ;; T
\log_2 8 ;; 3 ;; T
3 ;; \log_{2} 8 ;; T
2 ;; \log_3 9 ;; T
2 ;; \log_{10} 100 ;; T
4 ;; \log_2 16 ;; T
\frac{1}{2} ;; \log_4 2 ;; T
\log_2 3 ;; \frac{\ln 3}{\ln 2} ;; T
16 ;; \log_2 8 ;; F
3 ;; \log_2 9 ;; F
\log_2 8 ;; 8 ;; F
\log_2 8 ;; 2 ;; F
3 ;; \log_3 8 ;; F
2 ;; \log_{10} 1000 ;; F
\log_2 3 ;; \log_3 2 ;; F
"""

MATRIX_ENTRIES = r"""
\begin{pmatrix} 1 & 2 \\ 3 & 4 \end{pmatrix} ;; \begin{pmatrix}1&2\\3&4\end{pmatrix} ;; T
\begin{pmatrix}1&2\\3&4\end{pmatrix} ;; \begin{pmatrix} 1 & 2 \\ 3 & 4 \end{pmatrix} ;; T
\begin{pmatrix} 1 \\ 0 \end{pmatrix} ;; \begin{pmatrix}1\\0\end{pmatrix} ;; T
\begin{bmatrix} 1 & 0 \\ 0 & 1 \end{bmatrix} ;; \begin{pmatrix}1&0\\0&1\end{pmatrix} ;; T
\begin{pmatrix} 2 & -1 \\ 5 & 3 \end{pmatrix} ;; \begin{pmatrix}2&-1\\5&3\end{pmatrix} ;; T
\begin{pmatrix} 1 & 2 \\ 3 & 4 \end{pmatrix} ;; \begin{pmatrix} 2 & 2 \\ 3 & 4 \end{pmatrix} ;; F
\begin{pmatrix} 1 & 2 \\ 3 & 4 \end{pmatrix} ;; \begin{pmatrix} 1 & 2 \\ 4 & 3 \end{pmatrix} ;; F
\begin{pmatrix} 1 & 2 \\ 3 & 4 \end{pmatrix} ;; \begin{pmatrix} 3 & 4 \\ 1 & 2 \end{pmatrix} ;; F
\begin{pmatrix} 1 \\ 0 \end{pmatrix} ;; \begin{pmatrix} 0 \\ 1 \end{pmatrix} ;; F
\begin{pmatrix} 7 \\ -2 \end{pmatrix} ;; \begin{pmatrix} 7 \\ 2 \end{pmatrix} ;; F
\begin{pmatrix} 1 & 2 \end{pmatrix} ;; \begin{pmatrix} 2 & 1 \end{pmatrix} ;; F
"""

MIXED_NUMBERS = r"""
1 1/2 ;; \frac{3}{2} ;; T
1 1/2 ;; 1.5 ;; T
\frac{3}{2} ;; 1 1/2 ;; T
2 3/4 ;; \frac{11}{4} ;; T
2 3/4 ;; 2.75 ;; T
3\frac{1}{3} ;; \frac{10}{3} ;; T
5\frac{1}{4} ;; 5.25 ;; T
-1 1/2 ;; -\frac{3}{2} ;; T
1 1/2 ;; \frac{1}{2} ;; F
1 1/2 ;; 2 ;; F
2 3/4 ;; \frac{3}{2} ;; F
2 3/4 ;; \frac{5}{4} ;; F
3\frac{1}{3} ;; 1 ;; F
5\frac{1}{4} ;; \frac{5}{4} ;; F
-1 1/2 ;; -\frac{1}{2} ;; F
2 1/3 cups ;; \frac{7}{3} ;; T
2 1/3 cups ;; 2\frac{1}{3} \text{ cups} ;; T
1 1/2 hours ;; 1.5 ;; T
1 1/2 hours ;; \frac{3}{2} \text{ hours} ;; T
3\frac{1}{4} inches ;; 3.25 ;; T
2 1/3 cups ;; \frac{2}{3} ;; F
2 1/3 cups ;; \frac{1}{3} \text{ cups} ;; F
1 1/2 hours ;; \frac{1}{2} ;; F
1 1/2 hours ;; 1.5 \text{ minutes} ;; F
3\frac{1}{4} inches ;; \frac{3}{4} ;; F
"""

CONJUNCTIONS = r"""
5 or 9 ;; 5, 9 ;; T
5 or 9 ;; 9, 5 ;; T
5 \text{ or } 9 ;; 5 \text{ and } 9 ;; T
12 and 13 ;; 12, 13 ;; T
12 and 13 ;; 13 \text{ and } 12 ;; T
100 or 200 ;; 100, 200 ;; T
300 \text{ and } 400 ;; 300, 400 ;; T
1,000 or 2,000 ;; 1000, 2000 ;; T
x = 5 \text{ or } x = 9 ;; 5, 9 ;; T
100 or 200 ;; 100200 ;; F
300 \text{ and } 400 ;; 300400 ;; F
1,000 or 2,000 ;; 1000 ;; F
5 or 9 ;; 5 ;; F
5 or 9 ;; 9 ;; F
12 and 13 ;; 12 ;; F
5 or 9 ;; 5, 7 ;; F
x = 5 \text{ or } x = 9 ;; x=5 ;; F
"""


def _rows(cls: str, table: str, *, wrap: bool = True) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for number, line in enumerate(x for x in table.strip().splitlines() if x.strip()):
        parts = [p.strip() for p in line.split(";;")]
        gold, answer, mark = parts[0], parts[1], parts[2]
        note = parts[3] if len(parts) > 3 else ""
        styles = WRAPS if wrap else (("raw", "{a}"),)
        for style, template in styles:
            rows.append({
                "id": f"c-{cls}-{number}-{style}",
                "class": cls,
                "gold": gold,
                "completion": template.format(a=answer),
                "label": mark == "T",
                "ambiguous": mark == "A",
                "note": note,
                "source": "constructed",
            })
    return rows


def _exact_huge() -> list[tuple[str, str, bool]]:
    pairs = [
        ("3^{-120}", "3^{-121}", False),
        ("\\frac{1}{1999!}", "\\frac{1}{1998!}", False),
        ("\\frac{5^{900}-1}{5^{901}}", "\\frac{1}{5^{901}}", False),
        ("2^{100}", "2^{100}+1", False),
        ("2^{100}", str(2**100 + 1), False),
        ("10^{-30}", "10^{-31}", False),
        ("\\frac{1}{2^{64}}", "\\frac{1}{2^{63}}", False),
        ("100!", "99!", False),
        ("2^{2023}", "2^{2022}", False),
        ("3^{200}-1", "3^{200}", False),
        ("7^{-50}", "0", False),
        ("\\frac{1}{3^{40}}", "0", False),
        ("2^{-60}", "2^{-61}", False),
        ("1-10^{-20}", "1", False),
        ("10^{20}+1", "10^{20}", False),
        ("50!", "50!+1", False),
        ("\\binom{100}{50}", "\\binom{100}{49}", False),
        ("\\frac{2^{1000}+1}{3}", "\\frac{2^{1000}-1}{3}", False),
        ("2^{64}", str(2**64 - 1), False),
        ("20!", str(math.factorial(20) + 1), False),
        ("3^{-120}", "\\frac{1}{3^{120}}", True),
        ("2^{100}", str(2**100), True),
        ("\\frac{1}{1999!}", "\\frac{1}{1999!}", True),
        ("2^{10}\\cdot 2^{90}", "2^{100}", True),
        ("4^{50}", "2^{100}", True),
        ("10^{-30}", "1\\times10^{-30}", True),
        ("\\frac{5^{900}-1}{5^{901}}", "\\frac{1}{5}-\\frac{1}{5^{901}}", True),
        ("\\frac{100!}{98!}", "9900", True),
        ("20!", str(math.factorial(20)), True),
        ("2^{64}", str(2**64), True),
        ("2^{64}-1", str(2**64 - 1), True),
        ("3^{40}", str(3**40), True),
        ("9^{20}", "3^{40}", True),
        ("\\binom{10}{5}", str(math.comb(10, 5)), True),
        ("\\frac{1}{2^{64}}", "2^{-64}", True),
        ("10^{20}+1", str(10**20 + 1), True),
        ("8^{-20}", "2^{-60}", True),
        ("2^{2023}", "2\\cdot 2^{2022}", True),
        ("\\binom{30}{15}", str(math.comb(30, 15)), True),
        ("\\binom{30}{15}", str(math.comb(30, 15) - 1), False),
    ]
    return pairs


def _numeric() -> list[tuple[str, str, bool]]:
    """Fractions and decimals: equal forms, and near misses (off by one, sign, reciprocal)."""
    pairs: list[tuple[str, str, bool]] = []
    for num, den in ((3, 4), (5, 8), (7, 20), (9, 16), (1, 40), (13, 25), (11, 8), (27, 50), (3, 125), (17, 10)):
        value = Fraction(num, den)
        decimal = str(float(value))
        pairs += [
            (f"\\frac{{{num}}}{{{den}}}", decimal, True),
            (decimal, f"\\dfrac{{{num}}}{{{den}}}", True),
            (f"\\frac{{{num}}}{{{den}}}", f"{num * 3}/{den * 3}", True),
            (f"-\\frac{{{num}}}{{{den}}}", f"\\frac{{-{num}}}{{{den}}}", True),
            (f"\\frac{{{num}}}{{{den}}}", f"\\frac{{{den}}}{{{num}}}", False),
            (f"\\frac{{{num}}}{{{den}}}", f"-\\frac{{{num}}}{{{den}}}", False),
            (f"\\frac{{{num}}}{{{den}}}", f"\\frac{{{num + 1}}}{{{den}}}", False),
            (decimal, str(float(Fraction(num + 1, den))), False),
        ]
    return pairs


def _truncated() -> list[dict[str, object]]:
    """Whole completions: complete, cut off inside the final box, cut off after an earlier box, looping."""
    items = [
        ("42", "Adding the two parts gives 12 + 30 = 42."),
        ("36", "Each of the 3 boxes holds 12 balls, so there are 12 \\cdot 3 = 36 balls."),
        ("\\frac{3}{4}", "The favourable outcomes are 3 of 4, so the probability is \\frac{3}{4}."),
        ("17", "The primes below 20 that are 1 mod 4 are 5, 13 and 17; the largest is 17."),
        ("120", "There are 5! = 120 orderings of the five books."),
        ("2\\sqrt{3}", "The height of the triangle is \\sqrt{16-4} = 2\\sqrt{3}."),
        ("8", "We need 2^3 = 8 bits for the eight states."),
        ("-5", "Solving 2x + 10 = 0 gives x = -5."),
        ("1000", "Ten boxes of 100 sheets make 1000 sheets."),
        ("64", "The cube has side 4, so its volume is 4^3 = 64."),
        ("9", "The digits sum to 27, which is divisible by 9, so the answer is 9."),
        ("\\frac{1}{6}", "Only one face of six shows a six, so the chance is \\frac{1}{6}."),
        ("25", "The hypotenuse squared is 7^2 + 24^2 = 625, so it is 25."),
        ("3", "Dividing 12 by 4 gives 3."),
        ("0", "The two terms cancel, leaving 0."),
        ("7", "The remainder of 52 divided by 9 is 7."),
        ("50", "Half of 100 is 50."),
        ("11", "The next prime after 7 is 11."),
        ("144", "Twelve dozen is 12 \\cdot 12 = 144."),
        ("6", "The triangle has 3 \\cdot 2 = 6 orderings of its vertices."),
    ]
    rows: list[dict[str, object]] = []

    def add(name: str, index: int, gold: str, completion: str, label: bool, note: str = "") -> None:
        rows.append({"id": f"c-truncated-{index}-{name}", "class": "truncated", "gold": gold,
                     "completion": completion, "label": label, "ambiguous": False, "note": note,
                     "source": "constructed"})

    for index, (gold, reasoning) in enumerate(items):
        add("complete", index, gold, f"{reasoning}\n\nSo the final answer is $\\boxed{{{gold}}}$.", True)
        add("cut-in-box", index, gold, f"{reasoning}\n\nSo the final answer is $\\boxed{{", False,
            "cut off inside the final box")
        add("cut-after-earlier-box", index, gold,
            f"First we check the smaller case: $\\boxed{{{gold}}}$ works there. Now the general case. {reasoning} "
            f"Doubling for the second part, the final answer is $\\boxed{{2", False,
            "the final box was cut off; the earlier box is not the answer")
        add("cut-after-phrase", index, gold, f"{reasoning}\n\nTherefore, the final answer is", False,
            "cut off after the answer phrase")
        loop = "Wait, let me recompute the sum of the remaining terms once more. " * 40
        add("loop", index, gold, f"Let us set up the count. {loop}Wait, let me recompute the sum of {gold}", False,
            "degenerate repetition loop; the last number is a stray")
        add("loop-then-answer", index, gold,
            f"{reasoning} Let me double-check. {reasoning} Let me double-check. {reasoning}\n\n"
            f"The final answer is $\\boxed{{{gold}}}$.", True, "a few repeats, then a complete answer")
    return rows


def _multi_box() -> list[dict[str, object]]:
    table = [
        ("4, -5", "The roots are $\\boxed{4}, \\boxed{-5}$.", True),
        ("(1,3),(3,1)", "The solutions are $\\boxed{(1,3)} \\text{ and } \\boxed{(3,1)}$.", True),
        ("4, -5", "The roots are $\\boxed{-5}$ and $\\boxed{4}$.", True),
        ("4, -5", "The root is $\\boxed{4}$.", False),
        ("4", "It is either $\\boxed{4}$ or $\\boxed{-5}$.", False),
        ("4", "The candidates are $\\boxed{3}, \\boxed{4}$.", False),
        ("4", "Possible answers: \\boxed{2}, \\boxed{3}, \\boxed{4}, \\boxed{5}", False),
        ("4, -5", "The roots are $\\boxed{4}, \\boxed{5}$.", False),
        ("4, -5", "The roots are $\\boxed{4}, \\boxed{-5}, \\boxed{1}$.", False),
        ("2, 3", "$\\boxed{2}$ and $\\boxed{3}$", True),
        ("2, 3", "$\\boxed{2}$ and $\\boxed{3}$ and $\\boxed{6}$", False),
        ("6", "For the first part, $\\boxed{2}$. Then the second part needs the product of the first part "
              "with three, which we compute carefully below, step by step, before we conclude.\n\n"
              "The final answer is $\\boxed{6}$.", True),
        ("6", "First I thought the answer was $\\boxed{5}$, but checking the edge case again shows an extra "
              "arrangement that I had missed in the first count, so the count grows by one.\n\n"
              "The final answer is $\\boxed{6}$.", True),
        ("6", "The answer is $\\boxed{6}$ or maybe $\\boxed{7}$.", False),
        ("6", "\\boxed{6} \\boxed{6}", True),
        ("x=1, y=2", "$\\boxed{x = 1}, \\boxed{y = 2}$", True),
        ("x=1, y=2", "$\\boxed{x = 2}, \\boxed{y = 1}$", False),
        ("\\frac{1}{2}, 2", "$\\boxed{\\frac12} \\quad \\boxed{2}$", True),
        ("\\frac{1}{2}, 2", "$\\boxed{\\frac12}$", False),
        ("1, 2, 3", "\\boxed{1}, \\boxed{2}, \\boxed{3}", True),
        ("1, 2, 3", "\\boxed{1}, \\boxed{2}, \\boxed{4}", False),
        ("12", "Either \\boxed{12} or \\boxed{13} could be intended.", False),
    ]
    return [{"id": f"c-multi-box-{i}", "class": "multi-box", "gold": g, "completion": c, "label": lab,
             "ambiguous": False, "note": "", "source": "constructed"} for i, (g, c, lab) in enumerate(table)]


def _answer_sentences() -> list[dict[str, object]]:
    table = [
        ("12", "Final Answer: The smallest k is 12.", True),
        ("12", "Final Answer: The smallest k is 13.", False),
        ("41", "The answer is: **41**", True),
        ("41", "The answer is: **14**", False),
        ("41", "**Final Answer:** 41 apples", True),
        ("41", "**Final Answer:** 42 apples", False),
        ("5", "The answer is $x = 5$, which satisfies both equations.", True),
        ("5", "The answer is $x = 6$, which satisfies both equations.", False),
        ("7", "The final answer is that there are 7 ways.", True),
        ("8", "The final answer is that there are 7 ways.", False),
        ("24", "Final Answer: The final answer is 24 cm^2. I hope it is correct.", True),
        ("24", "Final Answer: The final answer is 25 cm^2. I hope it is correct.", False),
        ("17", "Answer: 17", True),
        ("17", "Answer: 71", False),
        ("15", "The answer is not 12; it is 15.", True),
        ("12", "The answer is not 12; it is 15.", False),
        ("\\frac{1}{2}", "So the probability is $\\frac{1}{2}$.\n\n**Final Answer**\n$\\frac{1}{2}$", True),
        ("\\frac{1}{2}", "So the probability is $\\frac{1}{2}$.\n\n**Final Answer**\n$\\frac{1}{3}$", False),
        ("9", "## Final Answer\nThe number of students is **9**.", True),
        ("9", "## Final Answer\nThe number of students is **8**.", False),
        ("3", "Thus the final answer is: the minimum value of $f$ is $3$.", True),
        ("3", "Thus the final answer is: the minimum value of $f$ is $-3$.", False),
        ("100", "the answer is 100 dollars", True),
        ("100", "the answer is 1000 dollars", False),
        ("2\\sqrt{2}", "Final Answer: The distance is $2\\sqrt{2}$ units.", True),
        ("2\\sqrt{2}", "Final Answer: The distance is $\\sqrt{2}$ units.", False),
        ("-1", "The final answer is **-1**.", True),
        ("-1", "The final answer is **1**.", False),
        ("6", "Final answer: `6`", True),
        ("6", "Final answer: `8`", False),
    ]
    return [{"id": f"c-answer-sentence-{i}", "class": "answer-sentence", "gold": g, "completion": c,
             "label": lab, "ambiguous": False, "note": "", "source": "constructed"}
            for i, (g, c, lab) in enumerate(table)]


def _conjunction_boxes() -> list[dict[str, object]]:
    """Whole completions: boxes joined by a conjunction are several answers, never one number with thousands."""
    table = [
        ("100 and 200", "The values are $\\boxed{100}$ and $\\boxed{200}$.", True),
        ("100200", "The values are $\\boxed{100}$ and $\\boxed{200}$.", False),
        ("125 \\text{ or } 250", "So $x = \\boxed{125}$ or $x = \\boxed{250}$.", True),
        ("125250", "So $x = \\boxed{125}$ or $x = \\boxed{250}$.", False),
    ]
    return [{"id": f"c-conjunctions-box-{i}", "class": "conjunctions", "gold": g, "completion": c, "label": lab,
             "ambiguous": False, "note": "", "source": "constructed"} for i, (g, c, lab) in enumerate(table)]


def _pairs_rows(cls: str, pairs: list[tuple[str, str, bool]]) -> list[dict[str, object]]:
    table = "\n".join(f"{g} ;; {a} ;; {'T' if lab else 'F'}" for g, a, lab in pairs)
    return _rows(cls, table)


def constructed() -> list[dict[str, object]]:
    """Every constructed row."""
    return (
        _rows("sig-digits", SIG_DIGITS)
        + _pairs_rows("exact-huge", _exact_huge())
        + _rows("free-symbols", FREE_SYMBOLS)
        + _rows("suffix-words", SUFFIX_WORDS)
        + _truncated()
        + _multi_box()
        + _answer_sentences()
        + _rows("thousands-vs-tuple", THOUSANDS)
        + _rows("spellings", SPELLINGS)
        + _rows("equations", EQUATIONS)
        + _rows("intervals", INTERVALS)
        + _rows("units", UNITS)
        + _rows("expressions", EXPRESSIONS)
        + _rows("symbolic-slow", SYMBOLIC_SLOW)
        + _pairs_rows("numeric", _numeric())
        + _rows("plain", PLAIN)
        + _rows("equation-sides", EQUATION_SIDES)
        + _rows("bound-indices", BOUND_INDICES)
        + _rows("log-base", LOG_BASE)
        + _rows("matrix-entries", MATRIX_ENTRIES)
        + _rows("mixed-numbers", MIXED_NUMBERS)
        + _rows("conjunctions", CONJUNCTIONS)
        + _conjunction_boxes()
    )
